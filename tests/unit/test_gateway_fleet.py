"""The gateway group's roles in a profile run (issue 18): a profile deploy leaves gateway hosts and Sparks that
serve another profile alone, and a fleet without a gateway group is planned exactly as before."""

from specfleet.preview import collect, report
from specfleet.steps import converge
from tests.unit.fakehost import changed_ops, converged_responses, executed, make_plans, run_deploy

FLEET = {"gw-1": {"ssh_hostname": "10.0.0.1"},
         "spark-a": {"ssh_hostname": "10.0.0.2", "serves": "eagle3", "operator_users": ["nvidia"]},
         "spark-b": {"ssh_hostname": "10.0.0.3", "serves": "draft_target", "operator_users": ["nvidia"]}}


def test_a_profile_run_skips_the_gateway_and_the_sparks_of_other_profiles():
    plans = make_plans(FLEET, "eagle3", groups={"gateway": ["gw-1"]})
    assert plans["gw-1"].skip == "a gateway host: deploys/gateway.py converges it"
    assert plans["spark-b"].skip == "serves draft_target: deploys/draft_target.py converges it"
    assert plans["spark-a"].skip is None and plans["spark-a"].settings.profile_name == "eagle3"
    # the skipped hosts are built without a profile: no model pins (the lock need not know their models)
    assert plans["gw-1"].settings.profile is None and plans["spark-b"].settings.profile is None
    assert not plans["gw-1"].pins and not plans["spark-b"].pins
    state = run_deploy(plans, converge, "eagle3", responses=lambda p: {} if p.skip else converged_responses(p))
    cmds = executed(state)
    assert cmds["gw-1"] == [] and cmds["spark-b"] == [], cmds  # not even a status read
    assert cmds["spark-a"] and not state.failed_hosts
    assert changed_ops(state) == {"gw-1": [], "spark-a": [], "spark-b": []}


def test_serves_without_a_gateway_group_still_picks_the_run():
    plans = make_plans({k: v for k, v in FLEET.items() if k != "gw-1"}, "draft_target")
    assert plans["spark-a"].skip == "serves eagle3: deploys/eagle3.py converges it"
    assert plans["spark-b"].skip is None and plans["spark-b"].settings.profile_name == "draft_target"


def test_a_fleet_without_gateways_or_serves_plans_as_before():
    before = {"spark-01": {}, "spark-02": {"gateway_backend_port": 8000}}  # no gateway group: no rule between vars
    plans = make_plans(before, "eagle3")
    assert all(p.skip is None and p.settings.profile_name == "eagle3" for p in plans.values())


def test_plan_names_the_hosts_this_deploy_skips():
    plans = make_plans(FLEET, "eagle3", groups={"gateway": ["gw-1"]})
    out: dict = {}
    run_deploy({"spark-a": plans["spark-a"]}, collect, out, responses=converged_responses)
    found = {k.removeprefix("@fake/"): v for k, v in out.items()}
    skipped = {h: p.skip for h, p in plans.items() if p.skip}
    lines, code = report(list(plans), found, set(), skipped)
    assert code == 0, lines  # skipped hosts are neither changes nor unreachable
    assert "gw-1: skipped (a gateway host: deploys/gateway.py converges it)" in lines
    assert "spark-b: skipped (serves draft_target: deploys/draft_target.py converges it)" in lines
    assert f"spark-a: release {plans['spark-a'].release_id}: nothing to do" in lines
