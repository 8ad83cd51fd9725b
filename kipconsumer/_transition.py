"""The error a state machine of the native clients raises when asked for a move its table forbids.

Each state machine (the consumer's MemberState and ClosePhase) has one guarded transition method
that checks the move against the machine's table of legal moves before it assigns the state. A
refused move is a bug in kipconsumer, never a misuse by the application (that is refused earlier,
with an IllegalStateError naming the call): hence an AssertionError, which nothing in kipconsumer
catches, naming the machine and both states so that the report says which move was attempted.
"""

from __future__ import annotations


class IllegalTransitionError(AssertionError):
    """A state machine was asked for a move its table of legal moves does not contain."""

    def __init__(self, machine: str, source: str, target: str) -> None:
        super().__init__(f"{machine}: illegal transition {source} -> {target} (a kipconsumer bug: "
                         f"please report it)")
        self.machine = machine
        self.source = source
        self.target = target

    def __reduce__(self) -> tuple[type[IllegalTransitionError], tuple[str, str, str]]:
        return (type(self), (self.machine, self.source, self.target))
