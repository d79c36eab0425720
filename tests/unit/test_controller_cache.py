"""Derived values are computed once per host and templates compiled once per process:
counted on a whole no-op converge of 3 hosts on pyinfra's @fake connector. The benchmark (benchmarks/) prints
what this saves; this test fails when a step goes back to re-rendering."""

import jinja2

from specfleet import plan as plan_mod
from specfleet.fleet import templating
from specfleet.steps import converge
from tests.unit.fakehost import changed_ops, converged_responses, make_plans, run_deploy


def test_a_noop_converge_renders_each_host_once_and_compiles_no_template_twice(monkeypatch):
    plans = make_plans({f"spark-0{i}": {"operator_users": ["nvidia"]} for i in range(3)}, "eagle3")
    answers = {plan.settings.host: converged_responses(plan) for plan in plans.values()}
    for plan in plans.values():
        plan._memo.clear()  # as built by inventory.py: nothing derived yet
    renders, compiles = [], []
    real_of, real_compile = plan_mod.Rendered.of.__func__, jinja2.Environment.compile

    def counting_of(cls, s, pins, pair_worker_release=None):
        renders.append(s.host)
        return real_of(cls, s, pins, pair_worker_release)

    def counting_compile(env, source, name=None, filename=None, raw=False, defer_init=False):
        compiles.append(name)
        return real_compile(env, source, name, filename, raw, defer_init)

    monkeypatch.setattr(plan_mod.Rendered, "of", classmethod(counting_of))
    monkeypatch.setattr(jinja2.Environment, "compile", counting_compile)
    templating.ENV.cache.clear()  # as in a fresh process
    state = run_deploy(plans, converge, "eagle3", responses=lambda plan: answers[plan.settings.host])
    assert not state.failed_hosts and changed_ops(state) == {h: [] for h in plans}
    # once per host, whatever the number of steps reading it (pyinfra hands each a shallow copy of the plan)
    assert sorted(renders) == sorted(plans), renders
    assert compiles.count("serving.service.j2") == 1, compiles


def test_a_changed_setting_renders_again():
    plan = make_plans({"spark-01": {}}, "eagle3")["spark-01"]
    before = plan.release_id
    plan.settings = plan.settings.model_copy(update={"serve_port": 8123})
    assert plan.release_id != before and "--port 8123" in plan.rendered.unit
