"""The DuckDB statements of the Jetstream ingester (see :mod:`aumann.data.bluesky.ingest`).

Each input file is scanned once into a slim temporary table ``ev`` (one row per non-blank line);
the per-file statistics and the small tables the panel needs are then read from ``ev``.

Why the column spec looks the way it does: the envelope fields are read as ``JSON`` so their JSON
types can be checked exactly (a typed ``BIGINT`` column would silently turn ``"123"`` or ``1.5``
into numbers); every line DuckDB cannot parse becomes an all-NULL row (with ``ignore_errors``),
which the validity test then counts as malformed. Record fields whose types differ between
lexicons (``reply``, ``facets``, ``tags``) are ``JSON`` too, so an unknown collection that reuses a
field name with another type never invalidates its line; ``text`` and ``subject`` are ``VARCHAR``,
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
# text starts with '"'; ``did`` (VARCHAR) is a DID string iff it starts with "did:" (a number or an
# object would read as its JSON text). ``record.subject`` as VARCHAR is a follow's DID string or a
# like's / repost's strongRef object re-serialised as normalised JSON (escaped slashes undone), so
# the subject's author is its 3rd '/'-separated part either way.
SCAN = f"""
CREATE OR REPLACE TEMP TABLE ev AS
WITH raw AS (
  SELECT did, time_us::VARCHAR AS t_txt, kind::VARCHAR AS k_txt, commit, identity, account
  FROM read_json(?, columns={COLUMNS}, format='newline_delimited', ignore_errors=true,
                 maximum_object_size=16777216, compression=?)),
typed AS (
  SELECT *, CASE WHEN NOT contains(t_txt, '.') THEN TRY_CAST(t_txt AS BIGINT) END AS time_us,
         CASE WHEN starts_with(k_txt, '"') THEN k_txt[2:-2] END AS kind
  FROM raw)
SELECT
  coalesce(starts_with(did, 'did:') AND time_us BETWEEN 1 AND 253402300799999999 AND kind IS NOT NULL
           AND (kind <> 'commit' OR (commit.collection IS NOT NULL AND commit.operation IS NOT NULL
                                     AND commit.rkey IS NOT NULL)), false) AS ok,
  did,
  time_us,
  time_us // {US_PER_DAY} AS day,
  kind,
  commit.collection AS collection,
  commit.operation AS operation,
  commit.rkey AS rkey,
  hash(did, kind, commit.collection, commit.rkey, commit.operation, commit.rev, identity, account) AS key,
  CASE WHEN kind = 'identity' THEN identity->>'$.handle' END AS handle,
  CASE WHEN commit.collection = 'app.bsky.feed.post' AND commit.operation = 'create'
       THEN commit.record.text END AS text,
  CASE WHEN commit.collection = 'app.bsky.feed.post' AND commit.operation = 'create'
       THEN commit.record.reply->>'$.parent.uri' END AS parent_uri,
  CASE WHEN commit.collection = 'app.bsky.feed.post' AND commit.operation = 'create'
            AND (commit.record.facets IS NOT NULL OR commit.record.tags IS NOT NULL)
       THEN list_concat(coalesce(commit.record.facets->>'$[*].features[*].tag', []),
                        coalesce(commit.record.tags->>'$[*]', [])) END AS tags,
  CASE WHEN commit.collection = 'app.bsky.feed.repost' AND starts_with(commit.record.subject, '{{')
       THEN json_extract_string(commit.record.subject, '$.uri') END AS subject_uri,
  CASE WHEN commit.collection IN ('app.bsky.feed.like', 'app.bsky.feed.repost')
            AND starts_with(commit.record.subject, '{{')
       THEN split_part(commit.record.subject, '/', 3)
       WHEN commit.collection = 'app.bsky.graph.follow' THEN commit.record.subject END AS target
FROM typed
"""

FILE_STATS = "SELECT count(*) AS rows, count(*) FILTER (WHERE ok) AS valid FROM ev"

BY_KIND_BY_KEY = """
SELECT kind, collection, operation, sum(c)::BIGINT AS n, count(*) AS uniq
FROM (SELECT key, any_value(kind) AS kind, any_value(collection) AS collection,
             any_value(operation) AS operation, count(*) AS c
      FROM ev WHERE ok GROUP BY key)
GROUP BY ALL
"""

# The same numbers as BY_KIND_BY_KEY (kept for the record: it groups all rows by key first) from two
# cheap aggregates: rows per (kind, collection, operation), and the few keys seen more than once, whose
# extra copies are subtracted from their group (a key belongs to one group: kind, collection and
# operation are part of it).
BY_KIND = """
WITH g AS (SELECT kind, collection, operation, count(*)::BIGINT AS n FROM ev WHERE ok GROUP BY ALL),
     d AS (SELECT key, count(*) - 1 AS extra FROM ev WHERE ok GROUP BY key HAVING count(*) > 1),
     x AS (SELECT kind, collection, operation, sum(extra)::BIGINT AS extra
           FROM (SELECT any_value(kind) AS kind, any_value(collection) AS collection,
                        any_value(operation) AS operation, any_value(d.extra) AS extra
                 FROM ev JOIN d USING (key) WHERE ok GROUP BY key)
           GROUP BY ALL)
SELECT g.kind, g.collection, g.operation, n, n - coalesce(x.extra, 0) AS uniq
FROM g LEFT JOIN x ON g.kind IS NOT DISTINCT FROM x.kind AND g.collection IS NOT DISTINCT FROM x.collection
                      AND g.operation IS NOT DISTINCT FROM x.operation
"""

BY_DAY = "SELECT day, count(*) AS n FROM ev WHERE ok GROUP BY day"

CREATE_STORE = """
CREATE TABLE acts (did VARCHAR);
CREATE TABLE eng (did VARCHAR);
CREATE TABLE tposts (key UBIGINT, uri VARCHAR, did VARCHAR, day BIGINT, topic VARCHAR);
CREATE TABLE replies (key UBIGINT, did VARCHAR, day BIGINT, parent_uri VARCHAR);
CREATE TABLE reposts (key UBIGINT, did VARCHAR, day BIGINT, subject VARCHAR);
CREATE TABLE fcreates (key UBIGINT, did VARCHAR, rkey VARCHAR, day BIGINT, subject VARCHAR);
CREATE TABLE fdeletes (did VARCHAR, rkey VARCHAR);
CREATE TABLE handles (did VARCHAR, handle VARCHAR, time_us BIGINT);
"""

# ``{win}`` is a day-range predicate (or ``true``); ``{topics}`` a list expression of matched names.
STORE = """
INSERT INTO acts SELECT DISTINCT did FROM ev
  WHERE ok AND kind = 'commit' AND starts_with(collection, 'app.bsky.') AND {win};
INSERT INTO eng
  WITH e AS (
    SELECT did, CASE WHEN collection = 'app.bsky.feed.post' THEN split_part(parent_uri, '/', 3)
                     ELSE target END AS target
    FROM ev WHERE ok AND operation = 'create' AND {win}
      AND collection IN ('app.bsky.feed.like', 'app.bsky.feed.repost', 'app.bsky.graph.follow',
                         'app.bsky.feed.post'))
  SELECT did FROM e WHERE starts_with(target, 'did:') AND target <> did
  UNION SELECT target FROM e WHERE starts_with(target, 'did:') AND target <> did;
INSERT INTO tposts
  SELECT key, uri, did, day, unnest(topics) FROM (
    SELECT key, 'at://' || did || '/app.bsky.feed.post/' || rkey AS uri, did, day,
           list_filter({topics}, lambda x: x IS NOT NULL) AS topics
    FROM (SELECT *, list_transform(coalesce(tags, []), lambda t: lower(ltrim(t, '#'))) AS ntags
          FROM ev WHERE ok AND collection = 'app.bsky.feed.post' AND operation = 'create' AND {win}
            AND ({prefilter})))
  WHERE len(topics) > 0;
INSERT INTO replies SELECT key, did, day, parent_uri FROM ev
  WHERE ok AND collection = 'app.bsky.feed.post' AND operation = 'create' AND parent_uri IS NOT NULL
    AND split_part(parent_uri, '/', 3) <> did AND {win};
INSERT INTO reposts SELECT key, did, day, subject_uri FROM ev
  WHERE ok AND collection = 'app.bsky.feed.repost' AND operation = 'create' AND subject_uri IS NOT NULL AND {win};
INSERT INTO fcreates SELECT key, did, rkey, day, target FROM ev
  WHERE ok AND collection = 'app.bsky.graph.follow' AND operation = 'create'
    AND starts_with(target, 'did:') AND target <> did AND {win};
INSERT INTO fdeletes SELECT DISTINCT did, rkey FROM ev
  WHERE ok AND collection = 'app.bsky.graph.follow' AND operation = 'delete' AND {win};
INSERT INTO handles SELECT did, handle, time_us FROM ev
  WHERE ok AND kind = 'identity' AND handle IS NOT NULL AND handle <> 'handle.invalid';
"""

# Users seen acting (app.bsky.* commits) with what the filters and followers need.
USERS = """
WITH a AS (SELECT DISTINCT did FROM acts),
     e AS (SELECT DISTINCT did FROM eng),
     h AS (SELECT did, arg_max(handle, time_us) AS handle FROM handles GROUP BY did),
     fc AS (SELECT DISTINCT key, did, rkey, subject FROM fcreates),
     wf AS (SELECT subject AS did, count(DISTINCT fc.did) AS n
            FROM fc ANTI JOIN fdeletes d ON fc.did = d.did AND fc.rkey = d.rkey GROUP BY subject)
SELECT a.did, e.did IS NOT NULL AS engaged, h.handle AS event_handle, coalesce(wf.n, 0) AS window_followers
FROM a LEFT JOIN e USING (did) LEFT JOIN h USING (did) LEFT JOIN wf USING (did)
ORDER BY a.did
"""

# Topic posts + topic reposts, and non-self replies received on topic posts, per (did, day, topic).
DAILY = """
WITH tp AS (SELECT DISTINCT key, uri, did, day, topic FROM tposts),
     tpu AS (SELECT DISTINCT uri, did, topic FROM tp),
     p AS (SELECT did, day, topic, count(DISTINCT key) AS n FROM tp GROUP BY ALL),
     rp AS (SELECT r.did, r.day, t.topic, count(DISTINCT r.key) AS n
            FROM reposts r JOIN tpu t ON r.subject = t.uri GROUP BY ALL),
     rr AS (SELECT t.did, r.day, t.topic, count(DISTINCT r.key) AS replies_received
            FROM replies r JOIN tpu t ON r.parent_uri = t.uri GROUP BY ALL),
     po AS (SELECT did, day, topic, sum(n)::BIGINT AS posts
            FROM (SELECT * FROM p UNION ALL SELECT * FROM rp) GROUP BY ALL)
SELECT k.user, (day - ?)::BIGINT AS day, topic,
       coalesce(po.posts, 0)::BIGINT AS posts, coalesce(rr.replies_received, 0)::BIGINT AS replies_received
FROM po FULL OUTER JOIN rr USING (did, day, topic) JOIN kept k USING (did)
ORDER BY k.user, day, topic
"""

FOLLOWS = """
SELECT k.user, (f.day - ?)::BIGINT AS day, count(DISTINCT f.key)::BIGINT AS follows_received
FROM fcreates f JOIN kept k ON f.subject = k.did
GROUP BY ALL ORDER BY k.user, day
"""

PROFILES = """
CREATE OR REPLACE TEMP TABLE prof_raw AS
SELECT trim(did) AS did, TRY_CAST(trim(followers_count) AS BIGINT) AS followers_count,
       {created} AS created_raw, {handle} AS handle
FROM read_csv(?, header=true, all_varchar=true)
"""

PROFILES_CLEAN = """
CREATE OR REPLACE TEMP TABLE prof AS
SELECT did, arg_max(followers_count, followers_count) AS followers_count,
       arg_max(TRY_CAST(created_raw AS TIMESTAMPTZ), followers_count) AS created_at,
       arg_max(handle, followers_count) AS handle
FROM prof_raw WHERE starts_with(did, 'did:') AND followers_count >= 0 GROUP BY did
"""
