"""The counterfactual persona check (issue 17): a pairwise judge under the user's profile and a
contrasting user's; a pair whose chosen keeps its advantage is not personal."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from conftest import build, write_config

from pipeline.checks.counterfactual import Result, advantage, not_personal
from pipeline.contrast import User, contrasts
from pipeline.errors import NothingReleased
from pipeline.release.load import load_rows


def user(key, category="A", aspects="", **levels) -> User:
    return User(key=key, category=category, aspects=aspects, levels=levels, profile=key)


def test_the_contrasting_user_conflicts_most_and_is_picked_the_same_way_every_time():
    users = {
        "p1": user("ann", expertise="novice", format="list", tone="warm"),
        "p2": user("bob", expertise="expert", format="prose", tone="blunt"),  # conflicts on 3
        "p3": user("cid", expertise="novice", format="prose", tone="warm"),  # conflicts on 1
        "p4": user("dee", category="B", expertise="expert", format="prose", tone="blunt"),
    }
    picked = contrasts(users)
    assert picked["p1"].key == "bob"  # the same category, the most conflicting dimensions
    assert picked["p3"].key == "bob"
    assert picked["p4"].key in {"ann", "bob", "cid"}  # alone in its category: anyone else
    assert contrasts(dict(reversed(users.items()))) == picked
    # without levels (imported users): the least similar aspects
    plain = {
        "x": user("u1", aspects="short bullet list for beginners"),
        "y": user("u2", aspects="short bullet list for experts"),
        "z": user("u3", aspects="long warm flowing prose"),
    }
    assert contrasts(plain)["x"].key == "u3"


def test_a_pair_is_personal_only_if_its_advantage_shrinks_under_the_contrast():
    assert advantage("A", "B") == 2.0 and advantage("B", "A") == 0.0
    assert advantage("A", "A") == 1.0 and advantage("tie", "B") == 1.5

    def r(t, c):
        return Result(
            contrast_user="u",
            true_ab=t[0],
            true_ba=t[1],
            contrast_ab=c[0],
            contrast_ba=c[1],
            advantage_true=advantage(*t),
            advantage_contrast=advantage(*c),
        )

    assert not_personal(r("AB", "AB"))  # chosen wins for anyone
    assert not not_personal(r("AB", "BA"))  # flips: personal
    assert not not_personal(r("AB", "AA"))  # shrinks: personal
    assert not not_personal(r("AA", "AA"))  # no advantage to keep: not this check's call


def test_on_a_degraded_simulator_every_unhelpful_rejected_answer_is_caught(sim_factory, tmp_path):
    url = sim_factory(degrade_rate=0.3)
    config = write_config(
        tmp_path / "on",
        url,
        personas={"per_category": 4},
        filters={"counterfactual": True, "evaluate_all": True},
    )
    with contextlib.suppress(NothingReleased):  # the records are what matter here
        build(config)
    run_dir = tmp_path / "on" / "outputs" / "demo"
    records = [json.loads(x) for x in (run_dir / "filters.jsonl").read_text().splitlines()]
    degraded = [f for f in records if f["pair"]["rejected"].startswith("I'm not sure")]
    assert degraded, "the simulator degraded no rejected answer"
    for f in degraded:  # a generic, unhelpful rejected answer loses for anyone
        assert "counterfactual_not_personal" in f["reasons"], f["checks"].get("counterfactual")
    for f in records:
        cf = f["checks"]["counterfactual"]
        assert cf["contrast_user"] != f["pair"]["task"]["persona"]["persona_id"]
        assert len({k for k in f["calls"] if k.startswith("cf_")}) == 4
    released = load_rows(run_dir / "release")[0] if any(f["kept"] for f in records) else []
    for row in released:  # released pairs carry the check's figures
        assert row["pair_checks"]["advantage_contrast"] is not None


def test_the_check_is_off_by_default_and_costs_nothing(sim_url, tmp_path):
    config = write_config(tmp_path, sim_url, personas={"per_category": 1})
    result = build(config)
    records = [
        json.loads(x) for x in (Path(result["run_dir"]) / "filters.jsonl").read_text().splitlines()
    ]
    assert records and all("counterfactual" not in f["checks"] for f in records)
    assert not [k for f in records for k in f["calls"] if k.startswith("cf_")]


def ranked_couples(users: dict[str, User]) -> dict[str, str]:
    """The couples as first specified: every pair of a category ranked by (similarity, keys),
    least similar first, each user in one couple (O(n^2) memory: 2 GB at 12,000 users)."""
    from pipeline.contrast import _similarity

    by_key = {u.key: u for u in users.values()}
    ranked = sorted(
        (_similarity(a, b), a.key, b.key)
        for a in by_key.values()
        for b in by_key.values()
        if a.key < b.key and a.category == b.category
    )
    mate: dict[str, str] = {}
    for _, a, b in ranked:
        if a not in mate and b not in mate:
            mate[a], mate[b] = b, a
    return mate


def test_swap_couples_by_levels_are_the_full_rankings_without_ranking_every_pair():
    """Issue 39: couples are read off the users' distinct levels (a category of 17,000 users
    has under a hundred), not a sorted list of every pair; they are the same couples."""
    import random

    from pipeline.contrast import partners

    rng = random.Random(5)
    levels = [
        {f"d{d}": rng.choice("abc") for d in rng.sample(range(7), rng.choice([5, 6]))}
        for _ in range(40)
    ]
    users = {
        f"t{i}": User(
            key=f"p{rng.randrange(10**6):06d}-{i}",
            category=rng.choice("XYZ"),
            aspects="",
            levels=rng.choice(levels),
            profile=f"t{i}",
        )
        for i in range(901)  # odd: a user is left over somewhere
    }
    found = partners(users)
    want = ranked_couples(users)
    assert {item: found[item].key for item, u in users.items() if u.key in want} == {
        item: want[u.key] for item, u in users.items() if u.key in want
    }
    left = [item for item, u in users.items() if u.key not in want]
    assert left and all(found[item] == contrasts(users)[item] for item in left)
