"""``long_lived_set_aside``: the objects alive on entry are left out of collections until the last scope ends."""

from __future__ import annotations

import gc
import weakref

from aumann.attribution.memory import long_lived_set_aside, release_freed


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_set_aside_objects_wait_for_the_exit_and_new_garbage_does_not():
    old = _Node()
    old_ref = weakref.ref(old)
    with long_lived_set_aside():
        assert gc.get_freeze_count() > 0
        del old
        release_freed()
        assert old_ref() is not None  # set aside: its cycle is not traversed inside the scope
        new = _Node()
        new_ref = weakref.ref(new)
        del new
        release_freed()
        assert new_ref() is None  # made inside: collected as before
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert old_ref() is None  # handed back on exit, then collected


def test_nested_scopes_thaw_only_when_the_last_one_ends():
    with long_lived_set_aside():
        with long_lived_set_aside():
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_an_error_inside_still_thaws():
    try:
        with long_lived_set_aside():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.get_freeze_count() == 0
