"""`with` for the objects whose cleanup is `close()`: one definition of enter and exit."""

from __future__ import annotations

from typing import Self


class Closing:
    """Mixin: `with obj:` gives obj and calls `obj.close()` on the way out, also on an error."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
