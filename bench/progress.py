"""A progress bar on stderr: tqdm when it is installed, else a plain progress line."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """``step(label)`` says the next item (``label``) starts, counting the previous one as done;
    ``close()`` counts the last one and ends the bar. Use as a context manager.

    Without tqdm, a line ``[  3/40 ] label (12 s)`` is written: rewritten in place on a terminal,
    otherwise at most every ``interval`` seconds (and for the last step), so logs stay short.
    """

    def __init__(self, total: int, desc: str = "bench", *, interval: float = 5.0, stream=None):
        self.total, self.done, self.desc, self.interval = int(total), 0, desc, interval
        self._started = False
        self.stream = stream or sys.stderr
        self._t0 = self._last = time.perf_counter()
        try:
            from tqdm import tqdm
        except ImportError:
            self._bar = None
        else:
            tty = getattr(self.stream, "isatty", lambda: False)()
            self._bar = tqdm(total=self.total, desc=desc, file=self.stream, mininterval=0.5 if tty else interval,
                             dynamic_ncols=True, leave=True)

    def step(self, label: str = "") -> None:
        if self._started:
            self.done += 1
        self._started = True
        if self._bar is not None:
            self._bar.set_postfix_str(label, refresh=False)
            self._bar.update(self.done - self._bar.n)
            return
        now = time.perf_counter()
        tty = getattr(self.stream, "isatty", lambda: False)()
        if tty or now - self._last >= self.interval or self.done == 0:
            self._last = now
            width = len(str(self.total))
            line = f"{self.desc} [{self.done:>{width}}/{self.total} done] {label} ({now - self._t0:.0f} s)"
            self.stream.write(("\r" + line.ljust(100)) if tty else line + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self._started:
            self.done += 1
            self._started = False
        if self._bar is not None:
            self._bar.update(self.done - self._bar.n)
            self._bar.close()
            return
        width = len(str(self.total))
        tty = getattr(self.stream, "isatty", lambda: False)()
        line = f"{self.desc} [{self.done:>{width}}/{self.total} done] ({time.perf_counter() - self._t0:.0f} s)"
        self.stream.write(("\r" + line.ljust(100) + "\n") if tty else line + "\n")
        self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False
