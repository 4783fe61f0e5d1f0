"""Who may charge what (issue 34): `-A ACCOUNT`, `--budget NAME` and `--project P` choose whose money
a job spends, so with authenticated identity they are checked against membership. Pure.

- an account: its `users` list the submitter, or it is `open = true`, or it is the account the
  submitter lands in without -A (config.default_account: the first that lists them, else "default");
- a budget a job joins by its own choice (a named batch budget, --budget; a project's, --project):
  its `users` list the submitter, or it is `open = true`. An account's budget follows its account;
- admins (security.admins) may charge anything.

An account or budget without `users` has no members: only admins use it until it lists them or
says `open = true` (closed by default: the budget is what the issue says any user could spend).
"""
from ..jobs.model import Job
from ..settings.config import Config


def refusal(job: Job, user: str, cfg: Config) -> str | None:
    """Why `user` may not submit `job` for the money it names, or None."""
    if user in cfg.security.admins:
        return None
    if not may_use_account(job.account, user, cfg):
        return (f"account {job.account!r}: {user} is not one of its users; accounts {user} may use: "
                f"{', '.join(usable_accounts(user, cfg))} (an admin adds {user} to "
                f"accounts.{job.account}.users, or sets open = true)")
    for b in cfg.budgets:
        if b.account or not b.applies_to(job) or b.open or user in b.users:
            continue
        how = f"--project {job.project}" if b.project else f"--budget {b.name}"
        mine = usable_budgets(user, cfg)
        return (f"budget {b.name!r} ({how}): {user} is not one of its users; budgets {user} may join: "
                f"{', '.join(mine) if mine else 'none'} (an admin adds {user} to its users, or sets open = true)")
    return None


def may_use_account(name: str, user: str, cfg: Config) -> bool:
    if name == cfg.default_account(user):
        return True
    a = cfg.account_named(name)
    if a is not None:
        return a.open or user in a.users
    # No table: a free label, unless a budget is scoped to it (then nobody is a member).
    return not any(b.account == name for b in cfg.budgets)


def usable_accounts(user: str, cfg: Config) -> list[str]:
    """The accounts `user` may name with -A: their default first."""
    mine = [cfg.default_account(user)]
    return mine + [a.name for a in cfg.accounts if a.name not in mine and (a.open or user in a.users)]


def usable_budgets(user: str, cfg: Config) -> list[str]:
    """The budgets `user` may join with --budget or --project."""
    return [b.name for b in cfg.budgets if not b.account and (b.open or user in b.users)]
