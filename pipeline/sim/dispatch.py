"""Which simulator handler answers a request: the build's tasks (responder), `prb eval`'s
(rm_judge) and `prb personas expand`'s (persona_writer), by the X-PRB-Task header or, lacking
it, by the tags in the prompt."""

from __future__ import annotations

import json

from pipeline.sim import persona_writer, responder, rm_judge

HANDLED = {
    "planner",
    "content_plan",
    "chosen",
    "rejected",
    "judge_quality",
    "judge_adherence",
    "judge_blind",
    "rm_pointwise",
    "rm_pairwise",
    "bon_oracle",
    "bon_candidate",
    "persona_expand",
    "published_pairwise",
    "judge_fit",
    "base_answer",
    "rewrite",
}


def detect_task(header: str | None, t: dict[str, str]) -> str:
    """The task by its name; a task the simulator does not know by name (a new judge, say) is
    answered as the known task whose prompt has the same shape (its tags)."""
    if header in HANDLED:
        return header
    if "avoid_aspects" in t and "past_posts" in t:  # the published recipe (prompts/published_*)
        return "rejected"
    if "aspects" in t and "past_posts" in t:
        return "chosen"
    if "profile" in t:
        return "planner"
    if "answer_a" in t:
        return "judge_blind"
    if "avoid_aspects" in t or "strategy" in t:
        return "rejected"
    if "key_points" in t:
        return "chosen"
    if "aspects" in t and "answer" in t:
        return "judge_adherence"
    if "answer" in t:
        return "judge_quality"
    return "content_plan"


def respond(
    task: str | None,
    messages: list[dict],
    model: str,
    seed: int | None,
    degrade_rate: float = 0.0,
    leaky: float = 0.0,
    degenerate_rate: float = 0.0,
    judge: str = "sound",
    schema: dict | None = None,
) -> str:
    """The answer to one chat request. `degrade_rate` turns that fraction of rejected answers
    (chosen by request hash, so deterministically) into an unhelpful one, for testing filters;
    `leaky` writes that fraction of rejected answers (True: all) so that they differ in more
    than personal fit (for the probes and the artifact gate);
    `degenerate_rate` makes that fraction of rejected answers one line said six times, as a
    weak model writes them (for the model-free quality floor); `judge` other than "sound"
    makes the pairwise judges weak: `random` verdicts, or `always_a` (judge qualification).
    `schema`, the request's JSON schema: a task the simulator does not know by name whose
    schema the answer of its shape does not fit is answered from the schema, as a server
    with constrained decoding would (a check or stage with an output model of its own)."""
    system = "\n".join(m.get("content") or "" for m in messages if m.get("role") == "system")
    user = "\n".join(m.get("content") or "" for m in messages if m.get("role") != "system")
    t = responder.tags(system) | responder.tags(user)  # a prompt may put data in either
    header_unknown = task not in HANDLED
    task = detect_task(task, t)
    rng = responder.rng_for(task, messages, model, seed)
    handlers = {
        "planner": lambda: responder.planner(t, rng),
        "content_plan": lambda: responder.content_plan(t, rng),
        "chosen": lambda: responder.chosen(t, system, rng),
        "rejected": lambda: responder.rejected(
            t, system, rng, responder.rng_for("leak", messages).random() < float(leaky)
        ),
        "judge_quality": lambda: responder.judge_quality(t, rng),
        "judge_adherence": lambda: responder.judge_adherence(t, rng),
        "judge_blind": lambda: responder.judge_blind(t, rng),
        "base_answer": lambda: responder.base_answer(t, rng),
        "rewrite": lambda: responder.rewrite(t, user, system),
    }
    handlers |= {
        "rm_pointwise": lambda: rm_judge.rm_pointwise(t, rng),
        "rm_pairwise": lambda: rm_judge.rm_pairwise(t, rng),
        "bon_oracle": lambda: rm_judge.bon_oracle(t, rng),
        "bon_candidate": lambda: rm_judge.bon_candidate(t, system, rng),
        "published_pairwise": lambda: rm_judge.published_pairwise(user, rng),
        "judge_fit": lambda: rm_judge.judge_fit(t, rng),
    }
    handlers["persona_expand"] = lambda: persona_writer.persona_expand(t, rng)
    if task == "rejected" and responder.rng_for("degrade", messages).random() < degrade_rate:
        return responder.DEGRADED
    if judge != "sound" and task in ("judge_blind", "rm_pairwise"):
        choice = "A" if judge == "always_a" else rng.choice(["A", "B", "tie"])
        return json.dumps({"choice": choice, "reason": f"a weak judge ({judge})"})
    answer = handlers[task]()
    if schema and header_unknown and not fits(answer, schema):
        return json.dumps(from_schema(schema, schema, rng))
    if task == "rejected" and responder.rng_for("loop", messages).random() < degenerate_rate:
        line = next((x for x in answer.splitlines() if x.strip()), answer)
        return "\n".join([line.strip()] * 6)
    return answer


def schema_of(body: dict) -> dict | None:
    """The JSON schema a chat-completions body asks for (json_schema, or llama.cpp's
    json_object with a schema), if any."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict):
        return None
    spec = fmt.get("json_schema") if fmt.get("type") == "json_schema" else fmt
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return schema if isinstance(schema, dict) else None


def fits(answer: str, schema: dict) -> bool:
    """Whether a JSON answer has the schema's required keys and no others (shallow)."""
    try:
        value = json.loads(answer)
    except ValueError:
        return False
    props = schema.get("properties") or {}
    return (
        isinstance(value, dict)
        and set(schema.get("required") or ()) <= set(value)
        and (not props or set(value) <= set(props))
    )


def from_schema(node: dict, root: dict, rng) -> object:
    """A valid instance of a JSON schema (pydantic's: $ref, anyOf, enum, bounds): booleans
    true, enums a seeded pick, numbers their lower bound, strings a short note."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return from_schema((root.get("$defs") or {}).get(name, {}), root, rng)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"] or node["anyOf"]
        return from_schema(options[0], root, rng)
    if "enum" in node:
        return rng.choice(node["enum"])
    if "const" in node:
        return node["const"]
    kind = node.get("type")
    if kind == "object":
        props = node.get("properties") or {}
        return {k: from_schema(v, root, rng) for k, v in props.items()}
    if kind == "array":
        return [from_schema(node.get("items") or {}, root, rng)] * int(node.get("minItems", 1))
    if kind == "boolean":
        return True
    if kind in ("integer", "number"):
        return node.get("minimum", node.get("exclusiveMinimum", 0))
    if kind == "string":
        return "x" * int(node.get("minLength", 0)) or "simulated"
    return None
