"""Synthetic Jetstream v1 fixtures with hand-known counts (imported by the ingestion tests).

Window: 2026-04-10 (day 0) and 2026-04-11 (day 1), one file per UTC day by ``time_us``.
Users (sorted DIDs → opaque index after filtering): A=0, B=1, C=2, D=3, H=4 are kept;
E (bot handle from an identity event), F (account 2 days old in the snapshot), G (only self
engagement) and I (profile update only) are dropped.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

DAY0_US = 1_775_779_200_000_000  # 2026-04-10T00:00:00Z
DAY_US = 86_400_000_000

A, B, C, D, E, F, G, H, I = (f"did:plc:{c * 24}" for c in "abcdefghi")


def post_uri(did: str, rkey: str) -> str:
    return f"at://{did}/app.bsky.feed.post/{rkey}"


@dataclass
class Capture:
    """Lines per day file plus what a correct ingester must report."""

    lines: dict[int, list[bytes]] = field(default_factory=lambda: {0: [], 1: []})
    kinds: Counter = field(default_factory=Counter)
    coll_ops: Counter = field(default_factory=Counter)
    malformed: int = 0
    duplicates: int = 0
    _rev: int = 0

    def _add(self, file_day: int, obj: dict, *, count: bool = True) -> bytes:
        line = json.dumps(obj, separators=(",", ":")).encode()
        self.lines[file_day].append(line)
        if count:
            self.kinds[obj["kind"]] += 1
            if obj["kind"] == "commit":
                self.coll_ops[(obj["commit"]["collection"], obj["commit"]["operation"])] += 1
        return line

    def commit(self, did: str, t_s: float, collection: str, op: str, rkey: str, record: dict | None = None,
               *, file_day: int | None = None, extra: dict | None = None) -> bytes:
        self._rev += 1
        c = {"rev": f"3mrev{self._rev:08d}", "operation": op, "collection": collection, "rkey": rkey}
        if record is not None:
            c["record"] = {"$type": collection, "createdAt": "2026-04-10T00:00:00.000Z", **record}
            c["cid"] = f"bafyrei{self._rev:020d}"
        obj = {"did": did, "time_us": DAY0_US + int(t_s * 1e6), "kind": "commit", "commit": c, **(extra or {})}
        return self._add(int(t_s // 86400) if file_day is None else file_day, obj)

    def post(self, did, t_s, rkey, text="", *, facet_tags=(), tags=None, parent=None, **kw):
        rec: dict = {"text": text, "langs": ["en"]}
        if facet_tags:
            rec["facets"] = [{"index": {"byteStart": 0, "byteEnd": 1},
                              "features": [{"$type": "app.bsky.richtext.facet#mention", "did": B}]
                              + [{"$type": "app.bsky.richtext.facet#tag", "tag": t} for t in facet_tags]}]
        if tags is not None:
            rec["tags"] = list(tags)
        if parent is not None:
            rec["reply"] = {"parent": {"uri": parent, "cid": "bafyparent"}, "root": {"uri": parent, "cid": "bafyroot"}}
        return self.commit(did, t_s, "app.bsky.feed.post", "create", rkey, rec, **kw)

    def like(self, did, t_s, rkey, subject_uri):
        return self.commit(did, t_s, "app.bsky.feed.like", "create", rkey,
                           {"subject": {"uri": subject_uri, "cid": "bafysubj"}})

    def repost(self, did, t_s, rkey, subject_uri):
        return self.commit(did, t_s, "app.bsky.feed.repost", "create", rkey,
                           {"subject": {"uri": subject_uri, "cid": "bafysubj"}})

    def follow(self, did, t_s, rkey, subject_did):
        return self.commit(did, t_s, "app.bsky.graph.follow", "create", rkey, {"subject": subject_did})

    def delete(self, did, t_s, collection, rkey):
        return self.commit(did, t_s, collection, "delete", rkey)

    def identity(self, did, t_s, handle=None, seq=1):
        ident = {"did": did, "seq": seq, "time": "2026-04-10T00:00:00.000Z"}
        if handle:
            ident["handle"] = handle
        return self._add(int(t_s // 86400), {"did": did, "time_us": DAY0_US + int(t_s * 1e6), "kind": "identity",
                                             "identity": ident})

    def account(self, did, t_s, seq=2):
        return self._add(int(t_s // 86400), {"did": did, "time_us": DAY0_US + int(t_s * 1e6), "kind": "account",
                                             "account": {"active": True, "did": did, "seq": seq,
                                                         "time": "2026-04-10T00:00:00.000Z"}})

    def raw(self, file_day: int, line: bytes, *, malformed: bool = True) -> None:
        self.lines[file_day].append(line)
        self.malformed += int(malformed)

    def duplicate(self, file_day: int, line: bytes) -> None:
        self.lines[file_day].append(line)
        self.duplicates += 1

    def write(self, folder: Path) -> list[Path]:
        folder.mkdir(parents=True, exist_ok=True)
        out = []
        for d, lines in self.lines.items():
            p = folder / f"2026-04-{10 + d:02d}.jsonl"
            p.write_bytes(b"\n".join(lines) + b"\n")
            out.append(p)
        return out


MALFORMED_LINES = {
    "truncated": b'{"did":"did:plc:zzzz","time_us":1775779300000000,"kind":"commit","commit":{"rev":"x","oper',
    "binary": b"\xff\xfe\x00\x01garbage\x1f\x9c\x00",
    "time_us_string": b'{"did":"did:plc:zzzz","time_us":"1775779300000000","kind":"identity"}',
    "time_us_float": b'{"did":"did:plc:zzzz","time_us":1775779300000000.5,"kind":"identity"}',
    "did_number": b'{"did":12345,"time_us":1775779300000000,"kind":"identity"}',
    "not_object": b'[{"did":"did:plc:zzzz","time_us":1775779300000000,"kind":"identity"}]',
    "commit_without_collection": b'{"did":"did:plc:zzzz","time_us":1775779300000000,"kind":"commit",'
                                 b'"commit":{"rev":"x","operation":"create","rkey":"r"}}',
    "commit_not_object": b'{"did":"did:plc:zzzz","time_us":1775779300000000,"kind":"commit","commit":"oops"}',
    "invalid_utf8_in_string": b'{"did":"did:plc:\xff\xfe","time_us":1775779300000000,"kind":"identity"}',
    "kind_number": b'{"did":"did:plc:zzzz","time_us":1775779300000000,"kind":7}',
}


def build() -> tuple[Capture, dict]:
    """The capture and the expected per-user per-day counts."""
    cap = Capture()
    h = 3600
    p1 = cap.post(A, 1 * h, "p1", "Tariffs are here, again.")          # trump-tariffs (keyword, capitalised)
    cap.post(A, 2 * h, "p2", "Sunday at Augusta", facet_tags=["TheMasters"])  # the-masters (facet tag)
    cap.post(B, 3 * h, "p3", "rally today", tags=["Climate"])          # earth-day-climate (record.tags)
    cap.post(B, 4 * h, "r1", "no", parent=post_uri(A, "p1"))          # reply received by A (tariffs)
    cap.post(C, 5 * h, "r2", "tariff madness", parent=post_uri(A, "p1"))  # reply to A + C's own topic post
    cap.post(A, 6 * h, "r3", "more on tariffs", parent=post_uri(A, "p1"))  # self-reply: A topic post, not received
    cap.repost(C, 7 * h, "rp1", post_uri(B, "p3"))                     # C: earth-day-climate repost
    cap.repost(D, 86400 + 1 * h, "rp2", post_uri(A, "p1"))             # D: tariffs repost on day 1
    cap.repost(D, 86400 + 2 * h, "rp3", post_uri("did:plc:unseen00000000000000000", "zzz"))  # unseen subject
    cap.post(D, 86400 + 7 * h, "r4", "nice shot", parent=post_uri(A, "p2"))  # reply on a day A posted nothing
    cap.like(C, 8 * h, "l1", post_uri(A, "p2"))
    cap.follow(D, 9 * h, "f1", A)
    cap.follow(C, 86400 + 3 * h, "f2", A)
    cap.delete(C, 86400 + 4 * h, "app.bsky.graph.follow", "f2")        # C unfollows: not a window follower
    cap.follow(B, 86400 + 5 * h, "f3", A)
    cap.follow(H, 10 * h, "f4", B)
    cap.follow(D, 11 * h, "f5", H)
    cap.duplicate(0, p1)                                               # reconnect replay
    # E: bot handle (identity event), posts about WrestleMania, likes A's post.
    cap.identity(E, 12 * h, handle="newsbot.bsky.social", seq=11)
    cap.post(E, 12 * h + 1, "e1", "WrestleMania tonight")
    cap.like(E, 12 * h + 2, "l2", post_uri(A, "p1"))
    # F: too young per the snapshot; posts, likes.
    cap.post(F, 13 * h, "f1", "The Masters is on")
    cap.like(F, 13 * h + 1, "l3", post_uri(A, "p2"))
    # G: only self engagement.
    cap.post(G, 14 * h, "g1", "hello")
    cap.like(G, 14 * h + 1, "l4", post_uri(G, "g1"))
    # H: tags with '#' and upper case; false-positive texts; mythos on day 1 by time_us (createdAt says day 0).
    cap.post(H, 15 * h, "h1", "tariffed awwe wwes The Mastersons", tags=["#MASTERS"])
    cap.post(H, 86400 - 0.5, "h2", "Claude Mythos is out", file_day=1)  # late line in the day-1 file, day 0
    cap.post(H, 86400 + 6 * h, "h3", "claude   MYTHOS preview")
    # I: profile update only.
    cap.commit(I, 16 * h, "app.bsky.actor.profile", "update", "self", {"displayName": "I"})
    # Kinds and collections that must be counted and otherwise ignored.
    cap.identity(A, 17 * h, seq=21)
    cap.account(A, 17 * h + 1, seq=22)
    cap.commit(B, 18 * h, "fm.teal.alpha.feed.play", "create", "t1", {"trackName": "x"})
    cap.delete(B, 18 * h + 1, "app.bsky.feed.post", "gone")
    cap.delete(C, 18 * h + 2, "app.bsky.feed.like", "l1")
    cap._add(0, {"did": A, "time_us": DAY0_US + 19 * h * 1_000_000, "kind": "sync", "sync": {"seq": 5},
                 "cursor": 99, "unknownTopLevel": {"x": [1, 2]}})
    for name, line in MALFORMED_LINES.items():
        cap.raw(0 if len(name) % 2 else 1, line)
    cap.raw(0, b"", malformed=False)  # blank line: skipped, not malformed
    expected = {
        # (user, day, topic): (posts, replies_received)
        (0, 0, "trump-tariffs"): (2, 2),
        (0, 0, "the-masters"): (1, 0),
        (0, 1, "the-masters"): (0, 1),
        (1, 0, "earth-day-climate"): (1, 0),
        (2, 0, "trump-tariffs"): (1, 0),
        (2, 0, "earth-day-climate"): (1, 0),
        (3, 1, "trump-tariffs"): (1, 0),
        (4, 0, "the-masters"): (1, 0),
        (4, 0, "mythos"): (1, 0),
        (4, 1, "mythos"): (1, 0),
    }
    follows = {(0, 0): 1, (0, 1): 2, (1, 0): 1, (4, 0): 1}
    users = {
        # user: (did, followers, source)
        0: (A, 1000, "snapshot"),
        1: (B, 50, "snapshot"),
        2: (C, 7, "snapshot"),
        3: (D, 0, "window_follows"),
        4: (H, 1, "window_follows"),
    }
    return cap, {"daily": expected, "follows": follows, "users": users,
                 "dropped": {"account_age": 1, "bot_handle": 1, "no_engagement": 2}}


PROFILES_CSV = (
    "did,followers_count,created_at,handle\n"
    f"{A},1000,2020-01-01T00:00:00Z,alice.bsky.social\n"
    f"{B},50,2021-05-01T00:00:00Z,abbott.bsky.social\n"
    f"{C},7,2024-01-01T00:00:00Z,nonlinearbotanist.bsky.social\n"
    f"{F},3,2026-04-08T00:00:00Z,robotics-lab.bsky.social\n"
    "not-a-did,5,2020-01-01T00:00:00Z,x\n"
    f"{G},lots,2020-01-01T00:00:00Z,g.bsky.social\n"
)
