"""Example rows of the workplace environment: a small random office world per row, one of five
task templates, the checks that grade it, and a gold tool-call path that passes them."""

from __future__ import annotations

import random
from datetime import date, timedelta
from typing import Any

DOMAIN = "northwind.example"
FIRST = [
    "Dana",
    "Priya",
    "Marcus",
    "Elena",
    "Kenji",
    "Fatima",
    "Lucas",
    "Ingrid",
    "Samuel",
    "Noor",
    "Tobias",
    "Mei",
    "Rafael",
    "Chloe",
    "Andre",
    "Yara",
]
LAST = [
    "Okafor",
    "Lindqvist",
    "Hernandez",
    "Novak",
    "Tanaka",
    "Haddad",
    "Brennan",
    "Costa",
    "Patel",
    "Schmidt",
    "Moreau",
    "Kowalski",
    "Reyes",
    "Nakamura",
    "Fischer",
    "Adeyemi",
]
ROLES = [
    "engineering manager",
    "designer",
    "finance lead",
    "recruiter",
    "product manager",
    "data analyst",
    "legal counsel",
    "sales director",
    "office manager",
    "support lead",
]
TOPICS = ["budget", "hiring", "launch", "roadmap", "offsite", "security", "pricing", "onboarding"]
DOCS = ["travel policy", "Q3 report", "vendor contract", "design brief", "sales forecast", "audit checklist"]
TITLES = [
    "Design review",
    "Vendor call",
    "Team standup",
    "Budget check-in",
    "Customer demo",
    "Hiring panel",
    "Roadmap planning",
    "Security briefing",
    "Sprint retro",
]
TIMES = ["09:00", "10:30", "11:00", "13:00", "14:30", "16:00"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
FILLER = [
    ("Lunch on Friday?", "Anyone up for the noodle place on Friday?"),
    ("Printer on the 3rd floor", "The printer is fixed, it needed a new drum."),
    ("Quarterly survey", "Please fill in the quarterly engagement survey by the end of the month."),
    ("Parking garage", "The garage is closed for cleaning next Tuesday."),
]

INSTRUCTIONS = (
    "You are an office assistant with access to the user's mailbox, calendar and contacts through tools. "
    "Look up email addresses with `lookup_contact` instead of guessing them. Times use the format "
    "YYYY-MM-DDTHH:MM. Only email the people the task requires. You are graded on the final state of the "
    "mailbox and calendar. When you are finished, reply with a short summary ending in `Answer: done`."
)


def _person(first: str, last: str, role: str) -> dict[str, str]:
    return {"name": f"{first} {last}", "email": f"{first}.{last}@{DOMAIN}".lower(), "role": role}


def _call(tool_name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": tool_name, "arguments": arguments}


class _World:
    """One row's world under construction."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.monday = date(2025, 3, 3) + timedelta(weeks=rng.randint(0, 30))
        firsts, lasts = rng.sample(FIRST, 8), rng.sample(LAST, 8)
        self.contacts = [_person(f, s, rng.choice(ROLES)) for f, s in zip(firsts, lasts, strict=True)]
        self.user = _person("Alex", "Morgan", "chief of staff")
        self.emails: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        for subject, body in rng.sample(FILLER, 2):
            self.add_email(rng.choice(self.contacts), subject, body)
        for title in rng.sample(TITLES, 2):
            self.add_event(title, self.day(rng.randrange(5)), rng.choice(TIMES), 30, rng.sample(self.contacts, 2))

    def day(self, i: int) -> date:
        return self.monday + timedelta(days=i)

    def add_email(self, sender: dict, subject: str, body: str) -> str:
        eid = f"m{len(self.emails) + 1}"
        self.emails.append(
            {
                "id": eid,
                "sender": sender["email"],
                "recipients": [self.user["email"]],
                "subject": subject,
                "body": body,
                "date": self.monday.isoformat(),
                "folder": "inbox",
            }
        )
        return eid

    def add_event(self, title: str, day: date, at: str, minutes: int, people: list[dict]) -> dict:
        start, end = _span(day, at, minutes)
        event = {
            "id": f"ev{len(self.events) + 1}",
            "title": title,
            "start": start,
            "end": end,
            "attendees": sorted(p["email"] for p in people),
        }
        self.events.append(event)
        return event

    def others(self, k: int) -> list[dict]:
        return self.rng.sample(self.contacts, k)

    def dump(self) -> dict[str, Any]:
        return {
            "user": self.user,
            "today": self.monday.isoformat(),
            "contacts": self.contacts,
            "emails": self.emails,
            "events": self.events,
        }


def _span(day: date, at: str, minutes: int) -> tuple[str, str]:
    h, m = map(int, at.split(":"))
    total = h * 60 + m + minutes
    return f"{day.isoformat()}T{at}", f"{day.isoformat()}T{total // 60:02d}:{total % 60:02d}"


def email_contact(w: _World) -> tuple[str, list, list]:
    (c,) = w.others(1)
    topic, day = w.rng.choice(TOPICS), w.rng.choice(WEEKDAYS)
    first = c["name"].split()[0]
    task = (
        f"Email {c['name']} to tell them that the {topic} review has moved to {day}. "
        f"Put the word '{topic}' in the subject."
    )
    checks = [{"check": "email_sent", "to": c["email"], "subject_has": [topic], "body_has": [day]}]
    gold = [
        _call("lookup_contact", name=c["name"]),
        _call(
            "send_email",
            recipient=c["email"],
            subject=f"{topic.capitalize()} review moved",
            body=f"Hi {first}, the {topic} review has moved to {day}. Best, Alex",
        ),
    ]
    return task, checks, gold


def forward_request(w: _World) -> tuple[str, list, list]:
    a, b = w.others(2)
    doc, day = w.rng.choice(DOCS), w.rng.choice(WEEKDAYS)
    eid = w.add_email(
        a,
        f"Request: {doc}",
        f"Hi Alex, could you send the {doc} to {b['name']}? They need it before {day}. Thanks, {a['name'].split()[0]}",
    )
    task = (
        f"{a['name']} emailed you a request about the {doc}. Read it and do what it asks. "
        f"Put '{doc}' in the subject of the email you send."
    )
    checks = [{"check": "email_sent", "to": b["email"], "subject_has": [doc]}]
    gold = [
        _call("search_emails", query=doc),
        _call("read_email", email_id=eid),
        _call("lookup_contact", name=b["name"]),
        _call(
            "send_email",
            recipient=b["email"],
            subject=f"The {doc}",
            body=f"Hi {b['name'].split()[0]}, {a['name']} asked me to send you the {doc}; it is attached.",
        ),
    ]
    return task, checks, gold


def schedule_meeting(w: _World) -> tuple[str, list, list]:
    a, b = w.others(2)
    topic = w.rng.choice(TOPICS)
    title, day, at, minutes = (
        f"{topic.capitalize()} sync",
        w.day(w.rng.randrange(5)),
        w.rng.choice(TIMES),
        w.rng.choice([30, 45, 60]),
    )
    start, end = _span(day, at, minutes)
    task = (
        f"Schedule a {minutes}-minute meeting titled '{title}' with {a['name']} and {b['name']} "
        f"on {day.isoformat()} at {at}."
    )
    people = sorted([a["email"], b["email"]])
    checks = [{"check": "event", "start": start, "end": end, "attendees": people, "title_has": [topic]}]
    gold = [
        _call("lookup_contact", name=a["name"]),
        _call("lookup_contact", name=b["name"]),
        _call("create_event", title=title, start=start, end=end, attendees=people),
    ]
    return task, checks, gold


def meeting_from_email(w: _World) -> tuple[str, list, list]:
    a, b = w.others(2)
    topic, i = w.rng.choice(TOPICS), w.rng.randrange(5)
    day, at, minutes = w.day(i), w.rng.choice(TIMES), w.rng.choice([30, 60])
    eid = w.add_email(
        a,
        f"Meeting about the {topic}",
        f"Hi Alex, can we meet on {WEEKDAYS[i]}, {day.isoformat()} at {at} for {minutes} minutes "
        f"to discuss the {topic}? Please also invite {b['name']}. {a['name'].split()[0]}",
    )
    start, end = _span(day, at, minutes)
    people = sorted([a["email"], b["email"]])
    task = (
        f"{a['name']} asked for a meeting by email. Read it and put the meeting on your calendar with "
        f"everyone it mentions; use the word '{topic}' in the title."
    )
    checks = [{"check": "event", "start": start, "end": end, "attendees": people, "title_has": [topic]}]
    gold = [
        _call("search_emails", query=topic),
        _call("read_email", email_id=eid),
        _call("lookup_contact", name=b["name"]),
        _call("create_event", title=f"{topic.capitalize()} discussion", start=start, end=end, attendees=people),
    ]
    return task, checks, gold


def report_schedule(w: _World) -> tuple[str, list, list]:
    (a,) = w.others(1)
    day = w.day(w.rng.randrange(5))
    taken = {e["title"] for e in w.events}
    titles = w.rng.sample([t for t in TITLES if t not in taken], 2)
    for title, at in zip(titles, sorted(w.rng.sample(TIMES, 2)), strict=True):
        w.add_event(title, day, at, 30, w.others(1))
    on_day = [e["title"] for e in sorted(w.events, key=lambda e: e["start"]) if e["start"].startswith(day.isoformat())]
    task = (
        f"Email {a['name']} the titles of all meetings on your calendar on {day.isoformat()}. "
        f"Use the subject 'Schedule for {day.isoformat()}'."
    )
    checks = [{"check": "email_sent", "to": a["email"], "subject_has": ["schedule"], "body_has": on_day}]
    gold = [
        _call("list_events", date=day.isoformat()),
        _call("lookup_contact", name=a["name"]),
        _call(
            "send_email",
            recipient=a["email"],
            subject=f"Schedule for {day.isoformat()}",
            body="Meetings that day: " + "; ".join(on_day),
        ),
    ]
    return task, checks, gold


TEMPLATES = [email_contact, forward_request, schedule_meeting, meeting_from_email, report_schedule]


def make_rows(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(f"workplace:{seed}")
    rows = []
    for i in range(n):
        template = TEMPLATES[i % len(TEMPLATES)]
        world = _World(rng)
        task, checks, gold = template(world)
        rows.append(
            {
                "responses_create_params": {
                    "input": [
                        {"role": "system", "content": INSTRUCTIONS},
                        {"role": "user", "content": f"Today is {world.monday.isoformat()}. {task}"},
                    ]
                },
                "env": "workplace",
                "task_id": f"workplace-{seed}-{i:03d}",
                "seed": rng.getrandbits(31),
                "template": template.__name__,
                "world": world.dump(),
                "expected_state": checks,
                "gold": {"calls": gold, "response": "Done. Answer: done"},
            }
        )
    return rows
