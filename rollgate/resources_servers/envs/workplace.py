"""Workplace: a stateful office assistant with a mailbox, a calendar and a contact list.

Each session seeds its own world from the row's `world` {user, contacts, emails, events, today}.
Tools: lookup_contact, search_emails, read_email, send_email, create_event, list_events.

Verify grades the FINAL STATE against the row's `expected_state` (a list of checks), never the
text:
- `{"check": "email_sent", "to": ADDR, "subject_has": [...], "body_has": [...]}`: a sent email to
  ADDR whose subject / body contain the words (case-insensitive);
- `{"check": "event", "start": ISO, "end": ISO, "attendees": [ADDR...], "title_has": [...]}`: an
  event at exactly that time whose attendees are exactly those (the user may be listed too).
Each check is one reward component worth 1/len(checks); they sum to the reward. A gate then
zeroes everything if the agent emailed anyone no `email_sent` check names (no spamming).
"""

from __future__ import annotations

import random
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.resources_servers.base import Environment, ToolError, tool
from rollgate.verifiers.compose import gate, weighted_sum
from rollgate.verifiers.state import compare_state
from rollgate.verifiers.strings import contains_all

EMAIL_RE = re.compile(r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$")
TIME_FMT = "%Y-%m-%dT%H:%M"


class Contact(BaseModel):
    name: str
    email: str
    role: str = ""


class Email(BaseModel):
    id: str
    sender: str
    recipients: list[str]
    subject: str
    body: str
    date: str = ""
    folder: Literal["inbox", "sent"] = "inbox"


class Event(BaseModel):
    id: str
    title: str
    start: str
    end: str
    attendees: list[str] = Field(default_factory=list)


class EmailCheck(BaseModel):
    check: Literal["email_sent"]
    to: str
    subject_has: list[str] = Field(default_factory=list)
    body_has: list[str] = Field(default_factory=list)


class EventCheck(BaseModel):
    check: Literal["event"]
    start: str
    end: str
    attendees: list[str]
    title_has: list[str] = Field(default_factory=list)


Check = Annotated[EmailCheck | EventCheck, Field(discriminator="check")]


class World(BaseModel):
    user: Contact
    today: str
    contacts: list[Contact] = Field(default_factory=list)
    emails: list[Email] = Field(default_factory=list)
    events: list[Event] = Field(default_factory=list)


class Expected(BaseModel):
    checks: list[Check] = Field(min_length=1)


class WorkplaceState(World):
    next_id: int = 1
    expected_state: list[dict[str, Any]] = Field(default_factory=list)  # what verify grades


def _parse_time(value: str, field: str) -> datetime:
    try:
        return datetime.strptime(value.strip(), TIME_FMT)
    except ValueError:
        raise ToolError(f"{field} must look like 2025-03-14T09:30 (YYYY-MM-DDTHH:MM), got {value!r}") from None


def _check_address(addr: str, field: str) -> str:
    addr = addr.strip()
    if not EMAIL_RE.match(addr):
        raise ToolError(f"{field} {addr!r} is not an email address; find addresses with lookup_contact")
    return addr.lower()


def _summary(e: Email) -> dict[str, Any]:
    return {"id": e.id, "from": e.sender, "to": e.recipients, "subject": e.subject, "date": e.date, "folder": e.folder}


class WorkplaceEnv(Environment):
    name = "workplace"
    description = "An office assistant: mailbox, calendar and contacts; graded on the final state."
    State = WorkplaceState
    reverify = "replay"

    def seed(self, task: TaskRow, rng: random.Random) -> tuple[WorkplaceState, str]:
        fields = task.env_fields
        if "world" not in fields or "expected_state" not in fields:
            raise ValueError("a workplace row needs `world` and `expected_state`")
        world = World.model_validate(fields["world"])
        Expected.model_validate({"checks": fields["expected_state"]})  # reject bad checks at seed time
        state = WorkplaceState(
            **world.model_dump(),
            next_id=len(world.emails) + len(world.events) + 1,
            expected_state=fields["expected_state"],
        )
        return state, f"You are {world.user.name} <{world.user.email}>. Today is {world.today}."

    def _new_id(self, state: WorkplaceState, prefix: str) -> str:
        new = f"{prefix}{state.next_id}"
        state.next_id += 1
        return new

    @tool
    def lookup_contact(
        self,
        state: WorkplaceState,
        name: Annotated[str, Field(min_length=1, max_length=100, description="full or partial name")],
    ) -> list[dict] | str:
        """Find contacts whose name (or address) contains the text; returns name, email and role."""
        needle = name.strip().lower()
        found = [c.model_dump() for c in state.contacts if needle in c.name.lower() or needle in c.email.lower()]
        return found or f"no contact matches {name!r}"

    @tool
    def search_emails(
        self,
        state: WorkplaceState,
        query: Annotated[str, Field(max_length=200, description="words to look for; empty lists all")] = "",
        folder: Literal["inbox", "sent", "all"] = "all",
    ) -> list[dict] | str:
        """Search emails whose sender, subject or body contain every word of the query (newest first)."""
        words = query.lower().split()
        hits = []
        for e in reversed(state.emails):
            text = f"{e.sender} {' '.join(e.recipients)} {e.subject} {e.body}".lower()
            if (folder == "all" or e.folder == folder) and all(w in text for w in words):
                hits.append(_summary(e))
        return hits[:20] or f"no email matches {query!r}"

    @tool
    def read_email(self, state: WorkplaceState, email_id: Annotated[str, Field(max_length=40)]) -> dict:
        """Read one email in full by its id."""
        for e in state.emails:
            if e.id == email_id.strip():
                return {**_summary(e), "body": e.body}
        raise ToolError(f"no email with id {email_id!r}; use search_emails to find ids")

    @tool
    def send_email(
        self,
        state: WorkplaceState,
        recipient: Annotated[str, Field(max_length=200, description="the recipient's email address")],
        subject: Annotated[str, Field(min_length=1, max_length=200)],
        body: Annotated[str, Field(max_length=5000)],
    ) -> str:
        """Send an email from the user's account."""
        to = _check_address(recipient, "recipient")
        email = Email(
            id=self._new_id(state, "m"),
            sender=state.user.email,
            recipients=[to],
            subject=subject,
            body=body,
            date=state.today,
            folder="sent",
        )
        state.emails.append(email)
        return f"sent email {email.id} to {to}"

    @tool
    def create_event(
        self,
        state: WorkplaceState,
        title: Annotated[str, Field(min_length=1, max_length=200)],
        start: Annotated[str, Field(max_length=40, description="YYYY-MM-DDTHH:MM")],
        end: Annotated[str, Field(max_length=40, description="YYYY-MM-DDTHH:MM")],
        attendees: Annotated[list[str], Field(max_length=20, description="email addresses")],
    ) -> str:
        """Put an event on the user's calendar and invite the attendees."""
        t0, t1 = _parse_time(start, "start"), _parse_time(end, "end")
        if t1 <= t0:
            raise ToolError("end must be after start")
        people = sorted({_check_address(a, "attendee") for a in attendees})
        event = Event(
            id=self._new_id(state, "ev"),
            title=title,
            start=t0.strftime(TIME_FMT),
            end=t1.strftime(TIME_FMT),
            attendees=people,
        )
        state.events.append(event)
        return f"created event {event.id}: {title} {event.start}..{event.end[11:]} with {', '.join(people) or 'nobody'}"

    @tool
    def list_events(
        self, state: WorkplaceState, date: Annotated[str, Field(max_length=20, description="YYYY-MM-DD")]
    ) -> list[dict] | str:
        """List the calendar's events on one day, in time order."""
        try:
            day = datetime.strptime(date.strip(), "%Y-%m-%d").strftime("%Y-%m-%d")
        except ValueError:
            raise ToolError(f"date must look like 2025-03-14 (YYYY-MM-DD), got {date!r}") from None
        hits = sorted((e for e in state.events if e.start.startswith(day)), key=lambda e: e.start)
        return [e.model_dump() for e in hits] or f"no events on {day}"

    def verify(self, state: WorkplaceState, request: VerifyRequest) -> VerifyResult:
        checks = Expected.model_validate({"checks": state.expected_state}).checks
        sent = [e for e in state.emails if e.folder == "sent"]
        scores: dict[str, float] = {}
        problems: list[str] = []
        for i, c in enumerate(checks):
            ok, why = _email_ok(c, sent) if isinstance(c, EmailCheck) else _event_ok(c, state)
            scores[f"{c.check}_{i}"] = 1.0 if ok else 0.0
            if not ok:
                problems.append(f"check {i} ({c.check}): {why}")
        allowed = {c.to.lower() for c in checks if isinstance(c, EmailCheck)}
        strays = sorted({r for e in sent for r in e.recipients if r not in allowed})
        if strays:
            problems.append(f"emailed people the task did not ask for: {', '.join(strays)}")
        weights = {k: 1.0 / len(scores) for k in scores}
        result = weighted_sum(
            scores, weights, metrics={"problems": problems, "emails_sent": len(sent), "events": len(state.events)}
        )
        return gate(not strays, result, name="no_stray_emails")


def _email_ok(c: EmailCheck, sent: list[Email]) -> tuple[bool, str]:
    to_them = [e for e in sent if c.to.lower() in e.recipients]
    if not to_them:
        return False, f"no email sent to {c.to}"
    for e in to_them:
        if not contains_all(e.subject, c.subject_has) and not contains_all(e.body, c.body_has):
            return True, ""
    last = to_them[-1]
    missing = contains_all(last.subject, c.subject_has) + contains_all(last.body, c.body_has)
    return False, f"email to {c.to} lacks {', '.join(missing)}"


def _event_ok(c: EventCheck, state: WorkplaceState) -> tuple[bool, str]:
    want = {a.lower() for a in c.attendees}
    user = state.user.email.lower()
    best = "no event at that time"
    for e in state.events:
        if compare_state({"start": c.start, "end": c.end}, e.model_dump()):
            continue
        people = set(e.attendees) - ({user} - want)
        if people != want:
            best = f"attendees {sorted(people)} != {sorted(want)}"
            continue
        missing = contains_all(e.title, c.title_has)
        if missing:
            best = f"title lacks {', '.join(missing)}"
            continue
        return True, ""
    return False, best


def example_tasks(n: int, seed: int) -> list[dict[str, Any]]:
    """`n` workplace rows, deterministic for `seed` (see workplace_tasks for the templates)."""
    from rollgate.resources_servers.envs.workplace_tasks import make_rows

    return make_rows(n, seed)
