"""`python -m tests.model --faults 3`: the explorer with other bounds than the suite's, for a
deeper run than `make test` has time for. Prints the counts, or the counterexample."""

from __future__ import annotations

import argparse

from tests.model.explorer import explore
from tests.model.protocol import Bounds
from tests.model.statements import Rules


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.model")
    defaults = Bounds()
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--retries", type=int, default=defaults.retries)
    parser.add_argument("--crashes", type=int, default=defaults.crashes)
    parser.add_argument("--stopped", type=int, default=defaults.stopped)
    parser.add_argument("--faults", type=int, default=defaults.faults)
    for rule in ("priority", "fencing", "outbox", "done-at-acquire"):
        parser.add_argument(f"--without-{rule}", action="store_true")
    args = parser.parse_args()
    rules = Rules(
        priority=not args.without_priority,
        fencing=not args.without_fencing,
        outbox=not args.without_outbox,
        done_at_acquire=not args.without_done_at_acquire,
    )
    bounds = Bounds(args.workers, args.retries, args.crashes, args.stopped, args.faults)
    found = explore(rules, bounds)
    print(f"{rules}\n{bounds}")
    print(
        f"{found.states} states, {found.transitions} transitions, {found.final_states} final, "
        f"{found.seconds:.1f}s"
    )
    if found.counterexample is not None:
        print(found.counterexample.render())
        raise SystemExit(1)


if __name__ == "__main__":
    main()
