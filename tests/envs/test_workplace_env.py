"""The workplace environment: tools act on a per-session world; verify grades the final state."""

from __future__ import annotations

import copy

import pytest

from rollgate.core.errors import BadRequest
from rollgate.core.schemas import VerifyRequest
from tests.envs.gold import example_rows, replay, runtime

DONE = VerifyRequest(response="Answer: done")


def _row(template: str) -> dict:
    return copy.deepcopy(next(r for r in example_rows("workplace") if r["template"] == template))


async def test_tools_read_and_change_the_world():
    rt = runtime("workplace")
    row = _row("forward_request")
    sid = (await rt.seed(row)).session_id
    someone = row["world"]["contacts"][0]
    found = await rt.call_tool(sid, "lookup_contact", {"name": someone["name"].split()[0].lower()})
    assert someone["email"] in found.output
    assert "no contact matches" in (await rt.call_tool(sid, "lookup_contact", {"name": "Zz Nobody"})).output
    request_id = row["gold"]["calls"][1]["arguments"]["email_id"]
    hits = await rt.call_tool(sid, "search_emails", {"query": "request", "folder": "inbox"})
    assert request_id in hits.output
    body = await rt.call_tool(sid, "read_email", {"email_id": request_id})
    assert "could you send" in body.output
    sent = await rt.call_tool(sid, "send_email", {"recipient": someone["email"], "subject": "hi", "body": "x"})
    assert not sent.is_error
    assert "hi" in (await rt.call_tool(sid, "search_emails", {"folder": "sent"})).output
    ev = await rt.call_tool(
        sid,
        "create_event",
        {"title": "Sync", "start": "2025-03-04T10:00", "end": "2025-03-04T10:30", "attendees": [someone["email"]]},
    )
    assert not ev.is_error
    listed = await rt.call_tool(sid, "list_events", {"date": "2025-03-04"})
    assert "Sync" in listed.output and someone["email"] in listed.output


@pytest.mark.parametrize(
    "tool,args,needle",
    [
        ("read_email", {"email_id": "m999"}, "no email with id"),
        ("send_email", {"recipient": "Dana", "subject": "s", "body": "b"}, "not an email address"),
        ("send_email", {"recipient": "a@b.example", "subject": "", "body": "b"}, "subject"),
        ("send_email", {"recipient": "a@b.example", "subject": "s"}, "body"),
        ("create_event", {"title": "t", "start": "tomorrow 9am", "end": "2025-03-04T10:00", "attendees": []}, "start"),
        (
            "create_event",
            {"title": "t", "start": "2025-03-04T10:00", "end": "2025-03-04T09:00", "attendees": []},
            "after start",
        ),
        (
            "create_event",
            {"title": "t", "start": "2025-03-04T10:00", "end": "2025-03-04T11:00", "attendees": "x@y.example"},
            "attendees",
        ),
        ("list_events", {"date": "03/04/2025"}, "YYYY-MM-DD"),
        ("lookup_contact", {"name": ""}, "name"),
    ],
)
async def test_bad_arguments_are_error_outputs_and_change_nothing(tool, args, needle):
    rt = runtime("workplace")
    sid = (await rt.seed(_row("email_contact"))).session_id
    before = await rt.state(sid)
    out = await rt.call_tool(sid, tool, args)
    assert out.is_error and needle in out.output, out
    assert await rt.state(sid) == before


async def test_email_to_someone_not_asked_for_zeroes_the_reward():
    rt = runtime("workplace")
    row = _row("email_contact")
    sid = (await rt.seed(row)).session_id
    await replay(rt, sid, row["gold"]["calls"])
    target = row["expected_state"][0]["to"]
    stray = next(c["email"] for c in row["world"]["contacts"] if c["email"] != target)
    await rt.call_tool(sid, "send_email", {"recipient": stray, "subject": "fyi", "body": "hello"})
    result = await rt.verify(sid, DONE)
    assert result.reward == 0.0 and result.metrics["no_stray_emails"] is False
    assert stray in " ".join(result.metrics["problems"])


async def test_event_with_wrong_attendees_or_time_fails_its_check():
    rt = runtime("workplace")
    row = _row("schedule_meeting")
    check = row["expected_state"][0]
    for change in ({"attendees": check["attendees"][:1]}, {"start": check["start"][:-5] + "08:00"}):
        sid = (await rt.seed(row)).session_id
        gold = copy.deepcopy(row["gold"]["calls"])
        gold[-1]["arguments"].update(change)
        outputs = await replay(rt, sid, gold)
        assert not any(o.is_error for o in outputs)
        result = await rt.verify(sid, DONE)
        assert result.reward == 0.0, (change, result)


async def test_each_check_is_one_component_and_they_sum_to_the_reward():
    rt = runtime("workplace")
    row = _row("schedule_meeting")
    other = next(c for c in row["world"]["contacts"] if c["email"] not in row["expected_state"][0]["attendees"])
    row["expected_state"].append({"check": "email_sent", "to": other["email"], "subject_has": ["agenda"]})
    sid = (await rt.seed(row)).session_id
    await replay(rt, sid, row["gold"]["calls"])  # does the event, not the email
    half = await rt.verify(sid, DONE)
    assert half.reward == pytest.approx(0.5)
    assert half.reward_components == {"event_0": 0.5, "email_sent_1": 0.0}
    await rt.call_tool(sid, "send_email", {"recipient": other["email"], "subject": "Agenda", "body": "..."})
    full = await rt.verify(sid, DONE)
    assert full.reward == pytest.approx(1.0) and full.reward_components == {"event_0": 0.5, "email_sent_1": 0.5}


async def test_sessions_have_separate_worlds():
    rt = runtime("workplace")
    row = _row("email_contact")
    a, b = (await rt.seed(row)).session_id, (await rt.seed(row)).session_id
    await replay(rt, a, row["gold"]["calls"])
    assert (await rt.verify(a, DONE)).reward == 1.0
    assert (await rt.verify(b, DONE)).reward == 0.0


@pytest.mark.parametrize(
    "mutate,needle",
    [
        (lambda r: r.pop("world"), "world"),
        (lambda r: r.update(expected_state=[]), "checks"),
        (lambda r: r.update(expected_state=[{"check": "teleport"}]), "teleport"),
        (lambda r: r["world"].pop("user"), "user"),
        (lambda r: r["world"]["contacts"].append({"name": "No Mail"}), "email"),
    ],
)
async def test_malformed_rows_are_bad_requests(mutate, needle):
    rt = runtime("workplace")
    row = _row("email_contact")
    mutate(row)
    with pytest.raises(BadRequest) as exc:
        await rt.seed(row)
    assert needle in str(exc.value)
