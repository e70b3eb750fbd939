"""A recording sink that also hears what a feed group's leg tells its router."""

from __future__ import annotations

from gateway.sessions import RecordingSink


class LegSink(RecordingSink):
    """A feed group's router as far as a leg's input goes (GroupRouter.leg_input): the
    socket the leg reads, -1 once its input is done."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[int] = []

    def leg_input(self, session_id: int, fd: int) -> None:
        self.inputs.append(fd)
