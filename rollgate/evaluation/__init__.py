"""Evaluation on Rollgate's environments: `rollgate eval` runs each task K times through the
normal rollout path and reports mean reward, unbiased pass@k and majority@k with bootstrap
intervals over tasks (failures counted apart, never as wrong answers); `compare` pairs two runs
task by task; `reverify` re-scores stored trajectories with today's verifiers.

Layer: beside rollgate.client and rollgate.trainer_adapters; it imports core, resources_servers,
agent_server, stack and client, and nothing below imports it. See docs/evaluation.md."""
