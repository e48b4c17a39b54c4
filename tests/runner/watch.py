"""A progress that records what :func:`gpolab.kit.store.resume` tells it (the tests' listener)."""


class Watch:
    def __init__(self, on_update=None):
        self.skipped, self.notes, self.on_update = [], [], on_update

    def skip(self, n: int) -> None:
        self.skipped.append(n)

    def update(self, n: int = 1, note: str = "") -> None:
        self.notes.append(note)
        if self.on_update is not None:
            self.on_update(note)
