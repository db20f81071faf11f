"""`rollgate audit`: find reward hacks before a policy does. Probe policies (scripted replies
that should not earn reward: an empty answer, the question's numbers, many candidates, a tool
spammed, ...) run through the normal rollout path; each probe's mean reward is compared with a
floor (a reply that answers nothing) and, where the task has one, the gold answer. See
docs/audit.md."""
