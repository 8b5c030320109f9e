"""Prompt templates live in prompts/<task>.yaml; this module loads, renders and hashes them.

A prompt file holds `task`, `version`, `output` (a model name from records.py, a model a check
or stage owns as `pipeline.<module>:<Model>`, or `text`),
`params` (temperature, max_tokens) and Jinja2 templates `system` and `user`. The output schema
is rendered into the prompt as `{{ output_schema }}`, so the file and its schema travel together.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import jinja2
import yaml
from pydantic import BaseModel

from pipeline import records
from pipeline.errors import PrbError
from pipeline.paths import DATA
from pipeline.registry import resolve
from pipeline.strategies import instructions

PROMPTS_DIR = DATA / "prompts"


def _inert(value: object) -> object:
    """Data put into a prompt cannot close its <profile>/<question>/<answer> blocks early
    (prompt injection by tag breaking): a `</` inside a value is spaced apart."""
    return value.replace("</", "< /") if isinstance(value, str) else value


_ENV = jinja2.Environment(
    undefined=jinja2.StrictUndefined, keep_trailing_newline=False, finalize=_inert
)


@functools.lru_cache(maxsize=256)
def _template(source: str) -> jinja2.Template:
    """Compiled once per template text: compiling on every call cost ~2 ms (bench/throughput)."""
    return _ENV.from_string(source)


@functools.lru_cache(maxsize=256)
def _schema(model: type[BaseModel]) -> str:
    return json.dumps(model.model_json_schema(), sort_keys=True)


PROMPT_KEYS = {"task", "version", "description", "output", "params", "system", "user"}


class PromptError(PrbError, ValueError):
    pass


@dataclass(frozen=True)
class Prompt:
    task: str
    version: str
    path: Path
    system: str
    user: str
    output: type[BaseModel] | None
    params: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # task-specific tables, e.g. rejected strategies
    sha256: str = ""
    # "jinja2": prb's own files; "replace": a foreign prompt filled in as its own scripts do,
    # each `{name}` of the user text replaced in turn, the system text sent as it is
    engine: str = "jinja2"

    def with_params(self, **params: object) -> Prompt:
        """The same prompt with some request parameters replaced (its hash and ref unchanged:
        parameters are in the cache key, not in the file)."""
        return replace(self, params={**self.params, **params})

    @property
    def ref(self) -> str:
        """`task@version+hash`: what manifests and records cite."""
        return f"{self.task}@{self.version}+{self.sha256[:12]}"

    def output_schema(self) -> str:
        if self.output is None:
            return "plain text"
        return _schema(self.output)

    def render(self, **variables: object) -> list[dict[str, str]]:
        if self.engine == "replace":
            user = self.user
            for name, value in variables.items():
                user = user.replace("{" + name + "}", str(value))
            return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]
        variables = {"output_schema": self.output_schema(), **variables}
        try:
            return [
                {"role": "system", "content": _template(self.system).render(variables)},
                {"role": "user", "content": _template(self.user).render(variables)},
            ]
        except jinja2.UndefinedError as e:
            raise PromptError(f"{self.path}: template variable missing: {e.message}") from None


def output_model(path: Path, name: str) -> type[BaseModel]:
    """A prompt's `output`: a model of records.py by name, or one a check or stage owns as
    "pipeline.<module>:<Model>" (so a judge check with its own schema is its module and its
    prompt file). Only prb's own modules: a prompt file never makes prb import other code."""
    found = None
    if ":" not in name:
        found = getattr(records, name, None)
    elif name.startswith("pipeline."):
        with contextlib.suppress(ImportError, AttributeError, ValueError):
            found = resolve(name)
    if not (isinstance(found, type) and issubclass(found, BaseModel)):
        raise PromptError(
            f"{path}: output {name!r} is neither a model in records.py nor a "
            "pipeline.<module>:<Model> (or `text`)"
        )
    return found


def load_prompt(task: str, prompts_dir: Path = PROMPTS_DIR) -> Prompt:
    path = Path(prompts_dir) / f"{task}.yaml"
    try:
        raw = path.read_bytes()
        data = yaml.safe_load(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise PromptError(f"{path}: cannot load prompt: {e}") from e
    missing = {"task", "version", "output", "system", "user"} - set(data or {})
    if missing:
        raise PromptError(f"{path}: missing keys {sorted(missing)}")
    output = None if data["output"] == "text" else output_model(path, str(data["output"]))
    prompt = Prompt(
        task=data["task"],
        version=str(data["version"]),
        path=path,
        system=data["system"],
        user=data["user"],
        output=output,
        params=dict(data.get("params") or {}),
        extra={k: v for k, v in data.items() if k not in PROMPT_KEYS},
    )
    added = b""
    if isinstance(prompt.extra.get("strategies"), dict):
        # rejected strategies other packages add (entry points `prb.strategies`: name ->
        # instruction), hashed with the file so the fingerprint and manifest see them
        plugins = {n: s for n, s in instructions().items() if n not in prompt.extra["strategies"]}
        prompt.extra["strategies"] = {**prompt.extra["strategies"], **plugins}
        added = json.dumps(plugins, sort_keys=True).encode() if plugins else b""
    digest = hashlib.sha256(raw + prompt.output_schema().encode() + added).hexdigest()
    return Prompt(**{**prompt.__dict__, "sha256": digest})


def all_prompts(prompts_dir: Path = PROMPTS_DIR) -> dict[str, Prompt]:
    return {
        p.stem: load_prompt(p.stem, prompts_dir) for p in sorted(Path(prompts_dir).glob("*.yaml"))
    }
