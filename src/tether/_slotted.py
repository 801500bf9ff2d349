"""`Slotted`: the base of the internal values built without attrs on the hook path.

The guard and its one shell model (`tether.guard`) and the stop's mount plan
(`tether.stop._mounts`) run in `tether guard --claude-hook`, a fresh process before every agent tool
call (spec 05: at most 3x a bare interpreter's start). Importing attrs alone costs that
process about 4x the bare start, and each attrs class is then built by generated code
at import (`docs/benchmarks.md`, "Guard hook start-up"). So these internal values are
plain classes with `__slots__` and a hand-written `__init__` whose fields are `Final`
(immutable to mypy, free at run time); this base gives them equality, a hash and a
repr over their fields, in the order `__match_args__` names them (as attrs sets it),
as the attrs classes they replace had. Public
values (`GuardVerdict`, the stop's records) stay attrs classes. It sits at the base
because both floors above it use it.
"""

from __future__ import annotations

__all__ = ("Slotted",)


class Slotted:
    """Equality, hash and repr over the fields `__match_args__` names, in that order."""

    __slots__ = ()
    __match_args__: tuple[str, ...] = ()

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__match_args__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Slotted)
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash((type(self), self._fields()))

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{name}={getattr(self, name)!r}" for name in self.__match_args__
        )
        return f"{type(self).__name__}({shown})"
