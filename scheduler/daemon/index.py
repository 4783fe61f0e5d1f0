"""What the scheduler keeps beside its job table (state.SchedulerState.jobs) so that a pass reads what
changed, not every record (issue 41): each job's place in the table's order, the pending records with
dependencies, and the ids whose records were replaced, added or removed since the last pass. During a
drain onto 60,000 held jobs the filters of every record that these replace (the jobs on nodes, the
pending jobs with dependencies) were ~7 % of the scheduler's time, one a pass."""
from collections.abc import Sequence

from ..jobs import states
from ..jobs.model import Job


class Index:
    def __init__(self) -> None:
        self.of: object = None                  # the table it is of; another (a new leader's, a test's): read anew
        self.places: dict[int, int] = {}        # id -> its place in the table's order: a replaced record keeps
        self.placed = 0                         # its own, a new one comes last (the places handed out)
        self.waiting_on: dict[int, Job] = {}    # id -> a pending record with dependencies
        self.touched: set[int] = set()          # ids put or added since the last pass took them (`take`)

    def on(self, table: dict[int, Job]) -> "Index":
        """This, of `table`: read whole where it was of another."""
        if self.of is not table:
            self.of, self.placed = table, len(table)
            self.places = dict(zip(table, range(len(table))))
            self.waiting_on = {j.id: j for j in table.values() if j.deps and j.state == states.PENDING}
        return self

    def place(self, j: Job) -> int:
        return self.places[j.id]

    def take(self) -> set[int]:
        """The ids touched since the last take."""
        touched, self.touched = self.touched, set()
        return touched

    def put(self, table: dict[int, Job], j: Job, old: Job | None) -> None:
        """`j` was put into `table` (or taken out: not active), where `old` was."""
        self.touched.add(j.id)
        if self.of is not table:
            return
        if j.state in states.ACTIVE:
            if old is None:
                self.places[j.id] = self.placed
                self.placed += 1
        elif old is not None:
            del self.places[j.id]
        if j.deps and j.state == states.PENDING:
            self.waiting_on[j.id] = j
        else:
            self.waiting_on.pop(j.id, None)

    def added(self, table: dict[int, Job], ids: range, jobs: Sequence[Job]) -> None:
        """A new array's tasks `jobs`, alike but for their `ids` (none in the table before), came last."""
        self.touched.update(ids)
        if self.of is not table:
            return
        self.places.update(zip(ids, range(self.placed, self.placed + len(jobs))))
        self.placed += len(jobs)
        if jobs[0].deps and jobs[0].state == states.PENDING:
            self.waiting_on.update(zip(ids, jobs))
