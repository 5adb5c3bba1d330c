"""The DuckDB statements of the Jetstream ingester (see :mod:`aumann.data.bluesky.ingest`).

Each input file is scanned once into a slim temporary table ``ev`` (one row per non-blank line);
the per-file statistics and the small tables the panel needs are then read from ``ev``.

Why the column spec looks the way it does: the envelope fields are read as ``JSON`` so their JSON
types can be checked exactly (a typed ``BIGINT`` column would silently turn ``"123"`` or ``1.5``
into numbers); every line DuckDB cannot parse becomes an all-NULL row (with ``ignore_errors``),
which the validity test then counts as malformed. Record fields whose types differ between
lexicons (``reply``, ``facets``, ``tags``) are ``JSON`` too, read with JSON paths whatever their shape. (A typed
``STRUCT`` would not invalidate a line either: DuckDB 2.0 reads a string, number, list or boolean where a ``STRUCT`` is
declared as NULL fields and keeps the line, checked for ``reply``; reading ``reply`` as ``STRUCT(parent STRUCT(uri
VARCHAR))`` gave the same parent URIs, a number's spelling aside, at no measurable saving.) ``text`` and ``subject``
are ``VARCHAR``,
which never fails either: a string reads as itself and any other JSON value as its JSON text (for
``text`` exactly what ``->>'$'`` on a JSON column gave, without serialising and re-parsing every
post's text).
"""

from __future__ import annotations

US_PER_DAY = 86_400_000_000

COLUMNS = (
    "{'did': 'VARCHAR', 'time_us': 'JSON', 'kind': 'JSON', "
    "'commit': 'STRUCT(rev VARCHAR, operation VARCHAR, collection VARCHAR, rkey VARCHAR, "
    "record STRUCT(text VARCHAR, reply JSON, subject VARCHAR, facets JSON, tags JSON))', "
    "'identity': 'JSON', 'account': 'JSON'}"
)

# One row per non-blank line; ``ok`` = a well-formed Jetstream envelope. A JSON column holds the
# value's (normalised) JSON text, so: ``time_us`` is an integer iff its text casts to BIGINT and has
# no '.' (floats print as 1.5 / 100000.0, strings keep their quotes); ``kind`` is a string iff its
# text starts with '"', and is then that text unquoted (``"commit"``, nearly every line, is matched first: one compare
# of two inlined strings instead of a prefix test and a substring, 4 % fewer instructions for the whole scan);
# ``did`` (VARCHAR) is a DID string iff it is ``did:<method>:<id>`` (:data:`DID_RE`; a
# number or an object would read as its JSON text). ``record.subject`` as VARCHAR is a follow's DID string or a
# like's / repost's strongRef object re-serialised as normalised JSON (escaped slashes undone), so
# the subject's author is its 3rd '/'-separated part either way. A string subject that starts with '{' reads the
# same as an object, so a repost's ``subject_uri`` is extracted under ``try``: such a string that is not JSON gives
# NULL (no repost link; its target, the 3rd part, is judged as any other), not an error refusing the whole file.
#
# Everything per record is decided here, in the one pass over the parsed lines, so that the later
# statements only filter a slim table: the four collections the panel reads get a code ``c`` (1 like,
# 2 post, 3 repost, 4 follow; 0 any other, whose name stays in ``coll``), ``act`` marks an
# ``app.bsky.*`` commit, ``eng_t`` is the other account a create engages with (a like's / repost's
# subject author, a reply's parent author, a follow's subject; NULL for self-engagement or a target
# that is not a DID by :data:`DID_RE`, the rule an event's ``did`` meets), ``eng_bad`` marks an engagement
# create whose target is not such a DID (missing, ``did:``, ``did:plc``, a handle: counted in the report as
# ``malformed_engagements``, never an edge; the DID rule itself is applied after the scan, by NOT_DIDS below),
# and record fields are kept only on the rows that use them
# (``rkey`` for posts and follows, ``time_us`` and ``handle`` for identity events, ``text`` / ``tags`` /
# ``parent_uri`` for post creates, ``subject_uri`` for reposts).
#: a DID as the W3C syntax writes it, ``did:<method>:<id>``: an event's ``did``, an engagement's target and a profile
#: row's (an event whose ``did`` is ``did:`` or ``did:plc`` is an invalid line, counted with the others, not a user;
#: a like of ``at://did:/...`` is a valid event but no engagement, counted in ``malformed_engagements``)
DID_RE = "did:[a-z0-9]+:[A-Za-z0-9._:%-]*[A-Za-z0-9._-]"

SCAN = f"""
CREATE OR REPLACE TEMP TABLE ev AS
WITH raw AS (
  SELECT did, time_us::VARCHAR AS t_txt, kind::VARCHAR AS k_txt, commit, identity, account
  FROM read_json(?, columns={COLUMNS}, format='newline_delimited', ignore_errors=true,
                 maximum_object_size=16777216, compression=?)),
typed AS (
  SELECT *, CASE WHEN NOT contains(t_txt, '.') THEN TRY_CAST(t_txt AS BIGINT) END AS time_us,
         CASE WHEN k_txt = '"commit"' THEN 'commit' WHEN starts_with(k_txt, '"') THEN k_txt[2:-2] END AS kind
  FROM raw),
flat AS (
  SELECT
    coalesce(did IS NOT NULL AND time_us BETWEEN 1 AND 253402300799999999 AND kind IS NOT NULL
             AND (kind <> 'commit' OR (commit.collection IS NOT NULL AND commit.operation IS NOT NULL
                                       AND commit.rkey IS NOT NULL)), false) AS ok,
    did, time_us, kind, commit.collection AS collection, commit.operation AS operation, commit.rkey AS rkey,
    commit.record.subject AS subject,
    CASE commit.collection WHEN 'app.bsky.feed.like' THEN 1 WHEN 'app.bsky.feed.post' THEN 2
         WHEN 'app.bsky.feed.repost' THEN 3 WHEN 'app.bsky.graph.follow' THEN 4 ELSE 0 END::UTINYINT AS c,
    hash(did, kind, commit.collection, commit.rkey, commit.operation, commit.rev, identity, account) AS key,
    CASE WHEN commit.collection = 'app.bsky.feed.post' AND commit.operation = 'create'
         THEN commit.record.reply->>'$.parent.uri' END AS parent_uri,
    CASE WHEN commit.collection = 'app.bsky.feed.post' AND commit.operation = 'create' THEN commit.record.text END
      AS text,
    CASE WHEN commit.collection = 'app.bsky.feed.post' AND commit.operation = 'create'
              AND (commit.record.facets IS NOT NULL OR commit.record.tags IS NOT NULL)
         THEN list_concat(coalesce(commit.record.facets->>'$[*].features[*].tag', []),
                          coalesce(commit.record.tags->>'$[*]', [])) END AS tags,
    CASE WHEN kind = 'identity' THEN identity->>'$.handle' END AS handle
  FROM typed),
eng AS (
  SELECT *,
    CASE WHEN ok AND operation = 'create' THEN
      CASE c WHEN 2 THEN split_part(parent_uri, '/', 3)
             WHEN 4 THEN subject
             WHEN 1 THEN CASE WHEN starts_with(subject, '{{') THEN split_part(subject, '/', 3) END
             WHEN 3 THEN CASE WHEN starts_with(subject, '{{') THEN split_part(subject, '/', 3) END END
    END AS e_t,
    ok AND operation = 'create' AND (c IN (1, 3, 4) OR (c = 2 AND parent_uri IS NOT NULL)) AS engages
  FROM flat)
SELECT
  ok, did, time_us // {US_PER_DAY} AS day, kind, operation, c,
  CASE WHEN c = 0 THEN collection END AS coll,
  key,
  coalesce(ok AND kind = 'commit' AND starts_with(collection, 'app.bsky.'), false) AS act,
  CASE WHEN e_t <> did THEN e_t END AS eng_t,
  coalesce(engages AND e_t IS NULL, false) AS eng_bad,
  CASE WHEN c = 4 OR (c = 2 AND operation = 'create') THEN rkey END AS rkey,
  CASE WHEN kind = 'identity' THEN time_us END AS time_us,
  handle, text, parent_uri, tags,
  CASE WHEN c = 3 AND starts_with(subject, '{{') THEN try(json_extract_string(subject, '$.uri')) END AS subject_uri
FROM eng
"""

# The DID rule (:data:`DID_RE`) is tested once per distinct value, not once per line: SCAN leaves it out of ``ok``,
# ``eng_t`` and ``eng_bad`` (an engagement create with no target at all is already ``eng_bad``), and these
# statements then apply it to the few distinct values that break it (none, in a clean capture, so the UPDATEs are
# skipped): a target that is not a DID is no edge but a malformed engagement, and an event whose ``did`` is not a DID
# is an invalid line (neither acting nor engaging). A regular expression over every line's two DIDs cost about as
# much as the reference envelope scan of the whole file; over the distinct values it costs a tenth of that.
#
# DIDS holds the distinct values (``v``: the ``did`` of a valid line, or an engagement target) with what table ``ud``
# keeps of each (``{win}`` is the window predicate of STORE): ``u`` whether it enters ``ud`` (it acts or engages in
# the window, or is engaged with there) and ud's flags ``a`` / ``e``. When every value passes the rule (a clean
# capture: nothing in ``ev`` changes), ``ud`` is filled from DIDS (STORE_UD_FROM_DIDS) rather than by a second
# aggregate over every line (STORE_UD, still used after APPLY_NOT_DIDS has changed ``ev``): one hash aggregate over
# the lines' DIDs instead of two (0.048 s instead of 0.068 s on the 300 MB benchmark).
DIDS = """
CREATE OR REPLACE TEMP TABLE dids AS
SELECT v, bool_or(a) AS a, bool_or(e) AS e, bool_or(u) AS u FROM (
  SELECT did AS v, act AND ({win}) AS a, eng_t IS NOT NULL AND ({win}) AS e,
         (act OR eng_t IS NOT NULL) AND ({win}) AS u
  FROM ev WHERE ok
  UNION ALL
  SELECT eng_t, false, {win}, {win} FROM ev WHERE eng_t IS NOT NULL)
GROUP BY v
"""

NOT_DIDS = f"SELECT list(v) FROM dids WHERE NOT regexp_full_match(v, '{DID_RE}')"

NOT_DID_TABLE = "CREATE OR REPLACE TEMP TABLE not_did AS SELECT unnest(?::VARCHAR[]) AS v"

APPLY_NOT_DIDS = """
UPDATE ev SET eng_t = NULL, eng_bad = true WHERE eng_t IN (SELECT v FROM not_did);
UPDATE ev SET ok = false, act = false, eng_t = NULL, eng_bad = false WHERE ok AND did IN (SELECT v FROM not_did);
"""

# ``bad_targets`` counts events, as ``by_kind`` does: a replayed copy of a line (the same ``key``) is counted once.
# It is a subquery with a WHERE, not ``count(DISTINCT key) FILTER (WHERE eng_bad)``: DuckDB runs a filtered distinct
# aggregate as a hash aggregate of (key, eng_bad) over every line (0.03 s of the 300 MB benchmark's 640k lines, 20×
# the subquery, which sees only the few rows with ``eng_bad``).
FILE_STATS = ("SELECT count(*) AS rows, count(*) FILTER (WHERE ok) AS valid, "
              "(SELECT count(DISTINCT key) FROM ev WHERE eng_bad) AS bad_targets FROM ev")



def _collection(t: str = "") -> str:
    """The collection's name back from its code (columns ``c`` and ``coll`` of table alias ``t``)."""
    return (f"CASE {t}c WHEN 1 THEN 'app.bsky.feed.like' WHEN 2 THEN 'app.bsky.feed.post' "
            f"WHEN 3 THEN 'app.bsky.feed.repost' WHEN 4 THEN 'app.bsky.graph.follow' ELSE {t}coll END")


BY_KIND_BY_KEY = f"""
SELECT kind, {_collection()} AS collection, operation, sum(n)::BIGINT AS n, count(*) AS uniq
FROM (SELECT key, any_value(kind) AS kind, any_value(c) AS c, any_value(coll) AS coll,
             any_value(operation) AS operation, count(*) AS n
      FROM ev WHERE ok GROUP BY key)
GROUP BY ALL
"""

# BY_KIND_DAY and DUPLICATES below give the same numbers as BY_KIND_BY_KEY (kept for the record: it groups all rows
# by key first) from two cheap aggregates.
# BY_KIND_DAY: valid lines per (kind, collection, operation, day), one aggregate for the report's counts by kind and
# by day (the ingester sums over days and over kinds); DUPLICATES: the extra copies of the few keys seen more than
# once, per (kind, collection, operation), which the ingester subtracts from their group (a key belongs to one
# group: kind, collection and operation are part of it). DUPLICATES groups every valid line by key; up to
# ``duplicates.SORTED_KEYS_MAX`` valid lines the keys are sorted in numpy instead (:mod:`.duplicates`: 27 CPU-ms
# instead of 64 on the benchmark) and only the repeated ones come back, to DUPLICATES_OF_REPEATED.
BY_KIND_DAY = f"""
SELECT kind, {_collection()} AS collection, operation, day, n
FROM (SELECT kind, c, coll, operation, day, count(*)::BIGINT AS n FROM ev WHERE ok GROUP BY ALL)
"""

_EXTRA_BY_GROUP = f"""
WITH d AS ({{repeated}})
SELECT kind, {_collection()} AS collection, operation, sum(extra)::BIGINT AS extra
FROM (SELECT any_value(kind) AS kind, any_value(c) AS c, any_value(coll) AS coll,
             any_value(operation) AS operation, any_value(d.extra) AS extra
      FROM ev JOIN d USING (key) WHERE ok GROUP BY key)
GROUP BY ALL
"""

DUPLICATES = _EXTRA_BY_GROUP.format(
    repeated="SELECT key, count(*) - 1 AS extra FROM ev WHERE ok GROUP BY key HAVING count(*) > 1")

# The same from the keys :mod:`.duplicates` found repeated by sorting them (a registered table ``repeated_keys``:
# one row per extra copy), for the files whose keys it sorts (VALID_KEYS) instead of grouping them here.
VALID_KEYS = "SELECT key FROM ev WHERE ok"

DUPLICATES_OF_REPEATED = _EXTRA_BY_GROUP.format(
    repeated="SELECT key, count(*) AS extra FROM repeated_keys GROUP BY key")

# What the panel needs from each file, accumulated over all files (TEMP tables: nothing is logged,
# and they spill to ``temp_directory`` like ``ev``). ``ud``: accounts that act (``a``: an app.bsky.*
# commit) or engage / are engaged with non-self (``e``). ``tcand``: the post creates that may match a topic
# (TOPIC_CANDIDATES); ``tposts``: those that do, one row per topic (TOPIC_POSTS, once, after the last file).
# ``links``: one row per use of a record, ``t``
# = 1 a non-self reply (``ref`` = the parent URI), 2 a repost (``ref`` = the subject URI), 3 a follow
# create (``ref`` = the followed DID), 4 a follow delete, 5 an identity event with a handle (``ref``).
CREATE_STORE = """
CREATE TEMP TABLE ud (did VARCHAR, a BOOLEAN, e BOOLEAN);
CREATE TEMP TABLE tcand (key UBIGINT, did VARCHAR, day BIGINT, rkey VARCHAR, text VARCHAR, tags VARCHAR[]);
CREATE TEMP TABLE tposts (key UBIGINT, uri VARCHAR, did VARCHAR, day BIGINT, topic VARCHAR);
CREATE TEMP TABLE links (t UTINYINT, key UBIGINT, did VARCHAR, day BIGINT, ref VARCHAR, rkey VARCHAR,
                         time_us BIGINT);
"""

# ``{win}`` is a day-range predicate (or ``true``).
# ``ud`` gets STORE_UD_FROM_DIDS (the same rows from table ``dids``: see DIDS) when the file holds no value that
# breaks the DID rule, else STORE_UD.
# A commit row serves at most one of the uses 1-4 (they need different collections or operations); an
# identity event (use 5) is selected on its own, so one that also carries a commit serves both.
STORE_UD = """
INSERT INTO ud SELECT did, bool_or(a), bool_or(e) FROM (
    SELECT did, act AS a, eng_t IS NOT NULL AS e FROM ev WHERE (act OR eng_t IS NOT NULL) AND {win}
    UNION ALL
    SELECT eng_t, false, true FROM ev WHERE eng_t IS NOT NULL AND {win})
  GROUP BY did
"""

STORE_UD_FROM_DIDS = "INSERT INTO ud SELECT v, a, e FROM dids WHERE u"

# The topic rules (``{topics}``: a list expression of the matched names, one regular expression with Unicode word
# boundaries per topic with keywords) are applied in two steps. Per file, TOPIC_CANDIDATES keeps the post creates
# that pass ``{prefilter}``, a necessary condition of every topic's rule (its keywords without the word boundaries,
# or its hashtags): 5,645 of the 300 MB benchmark's 83,193 posts. After the last file, TOPIC_POSTS applies the exact
# rules to those, once. What the rules cost is compiling them, not running them: RE2 compiles each ``[^\pL\pN_]``
# class in ~1 ms, and DuckDB compiles every rule when binding, again in its expression rewriter (which rewrites
# nothing here, so it is turned off for this statement) and again in every thread that runs the statement (over the
# candidates, a small table, one thread runs it). The rules are compiled once per ingest, not per file. ``{words}`` is
# the text the keyword rules read: with ASCII keywords (the default topics), a copy of ``text`` whose non-word
# characters other than whitespace are U+0001, so that the rules need no Unicode class (see ``ingest._topics_expr``;
# 0.028 -> 0.017 s on the benchmark).
TOPIC_CANDIDATES = """
INSERT INTO tcand SELECT key, did, day, rkey, text, tags
FROM ev WHERE ok AND c = 2 AND operation = 'create' AND {win} AND ({prefilter})
"""

TOPIC_POSTS = """
SET disabled_optimizers = 'expression_rewriter';
INSERT INTO tposts
  SELECT key, uri, did, day, topic FROM (
    SELECT key, 'at://' || did || '/app.bsky.feed.post/' || rkey AS uri, did, day, unnest({topics}) AS topic
    FROM (SELECT *, {words} AS words, list_transform(coalesce(tags, []), lambda t: lower(ltrim(t, '#'))) AS ntags
          FROM tcand))
  WHERE topic IS NOT NULL;
RESET disabled_optimizers;
"""

STORE = """
INSERT INTO links
  SELECT t, key, did, day, CASE t WHEN 1 THEN parent_uri WHEN 2 THEN subject_uri ELSE eng_t END AS ref,
         CASE WHEN t >= 3 THEN rkey END AS rkey, NULL AS time_us
  FROM (SELECT *, CASE WHEN c = 2 AND parent_uri IS NOT NULL AND split_part(parent_uri, '/', 3) <> did THEN 1
                       WHEN c = 3 AND subject_uri IS NOT NULL THEN 2
                       WHEN c = 4 AND operation = 'create' AND eng_t IS NOT NULL THEN 3
                       WHEN c = 4 AND operation = 'delete' THEN 4 END::UTINYINT AS t
        FROM ev WHERE ok AND c IN (2, 3, 4) AND (operation = 'create' OR (c = 4 AND operation = 'delete')) AND {win})
  WHERE t IS NOT NULL
  UNION ALL
  SELECT 5, key, did, day, handle, NULL, time_us FROM ev
  WHERE ok AND kind = 'identity' AND handle IS NOT NULL AND handle <> 'handle.invalid';
"""

# Users seen acting (app.bsky.* commits) with what the filters and followers need. ``window_followers`` counts
# distinct followers, so a follow create seen twice (a replayed line, or two files) needs no DISTINCT before the
# anti join, nor does the deletes' side of an anti join (the two DISTINCTs cost 8 of the statement's 25 ms).
USERS = """
WITH u AS (SELECT did, bool_or(a) AS a, bool_or(e) AS e FROM ud GROUP BY did),
     h AS (SELECT did, arg_max(ref, time_us) AS handle FROM links WHERE t = 5 GROUP BY did),
     fc AS (SELECT did, rkey, ref AS subject FROM links WHERE t = 3),
     fd AS (SELECT did, rkey FROM links WHERE t = 4),
     wf AS (SELECT subject AS did, count(DISTINCT fc.did) AS n
            FROM fc ANTI JOIN fd d ON fc.did = d.did AND fc.rkey = d.rkey GROUP BY subject)
SELECT u.did, coalesce(u.e, false) AS engaged, h.handle AS event_handle, coalesce(wf.n, 0) AS window_followers
FROM u LEFT JOIN h USING (did) LEFT JOIN wf USING (did)
WHERE u.a
ORDER BY u.did
"""

# Topic posts + topic reposts, and non-self replies received on topic posts, per (did, day, topic). Every count is
# of distinct record keys, so a post stored twice (a replayed line) needs no DISTINCT before it.
DAILY = """
WITH tpu AS (SELECT DISTINCT uri, did, topic FROM tposts),
     p AS (SELECT did, day, topic, count(DISTINCT key) AS n FROM tposts GROUP BY ALL),
     rp AS (SELECT r.did, r.day, t.topic, count(DISTINCT r.key) AS n
            FROM links r JOIN tpu t ON r.ref = t.uri WHERE r.t = 2 GROUP BY ALL),
     rr AS (SELECT t.did, r.day, t.topic, count(DISTINCT r.key) AS replies_received
            FROM links r JOIN tpu t ON r.ref = t.uri WHERE r.t = 1 GROUP BY ALL),
     po AS (SELECT did, day, topic, sum(n)::BIGINT AS posts
            FROM (SELECT * FROM p UNION ALL SELECT * FROM rp) GROUP BY ALL)
SELECT k.user, (day - ?)::BIGINT AS day, topic,
       coalesce(po.posts, 0)::BIGINT AS posts, coalesce(rr.replies_received, 0)::BIGINT AS replies_received
FROM po FULL OUTER JOIN rr USING (did, day, topic) JOIN kept k USING (did)
ORDER BY k.user, day, topic
"""

FOLLOWS = """
SELECT k.user, (f.day - ?)::BIGINT AS day, count(DISTINCT f.key)::BIGINT AS follows_received
FROM links f JOIN kept k ON f.ref = k.did
WHERE f.t = 3
GROUP BY ALL ORDER BY k.user, day
"""

#: how the profile CSV is read: ``null_padding`` pads a row with fewer fields than the header with NULLs (without it
#: one short row among the rows DuckDB sniffs made it read the whole header as one column, and the snapshot was
#: refused as lacking ``did``), and a ``nullstr`` no CSV holds keeps an empty field ``''``, so NULL marks a padded
#: field only: such a row is malformed (``fields_ok`` false) and counted as an invalid row
PROFILES_CSV = "read_csv(?, header=true, all_varchar=true, null_padding=true, nullstr='\x01aumann:padded\x01')"

PROFILES = """
CREATE OR REPLACE TEMP TABLE prof_raw AS
SELECT trim(did) AS did,
       CASE WHEN regexp_full_match(trim(followers_count), '[0-9]{{1,18}}')
            THEN CAST(trim(followers_count) AS BIGINT) END AS followers_count,
       {created} AS created_raw, {handle} AS handle, {fields_ok} AS fields_ok
FROM """ + PROFILES_CSV + """
"""

#: a profile row's test: a DID (``did:<method>:<id>``, the W3C syntax) and a whole, non-negative follower count
#: no larger than counts.MAX_COUNT (``10.7`` is not a count; it was rounded to 11), in a row with as many fields as
#: the header (``fields_ok``: a short row's fields may be shifted, so none of them is trusted)
PROFILE_VALID = (f"regexp_full_match(did, '{DID_RE}') "
                 "AND followers_count BETWEEN 0 AND {max_count} AND fields_ok")

#: a profile row's ``created_at`` as a timestamp, or NULL when it does not parse or lies outside the years 1678-2262
#: (pandas' nanosecond range; no account was created there: ``2999-01-01`` or ``infinity`` ended the build in
#: pandas' OutOfBoundsDatetime); such a row's age is unknown and it is counted in ``unparseable_created_at``
CREATED_AT = ("CASE WHEN TRY_CAST(created_raw AS TIMESTAMPTZ) BETWEEN '1678-01-01 00:00:00+00'::TIMESTAMPTZ "
              "AND '2262-04-11 00:00:00+00'::TIMESTAMPTZ THEN TRY_CAST(created_raw AS TIMESTAMPTZ) END")

PROFILES_CLEAN = """
CREATE OR REPLACE TEMP TABLE prof AS
SELECT did, arg_max(followers_count, followers_count) AS followers_count,
       arg_max({created_at}, followers_count) AS created_at,
       arg_max(handle, followers_count) AS handle
FROM prof_raw WHERE {valid} GROUP BY did
"""
