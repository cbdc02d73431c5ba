"""The Task contract: what an env needs to set up, run and verify one episode."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from guigym.core.paths import check_task_id

Platform = Literal["web", "desktop", "android"]


class Task(BaseModel):
    """One benchmark task, loaded from its benchmark's native format by an adapter.

    ``setup`` and ``evaluator`` keep the native structure (e.g. OSWorld's ``config`` list and
    ``evaluator`` dict) so nothing is lost in translation; ``source`` says which format it was.

    ``id`` becomes a directory name (trajectories, caches), so it must pass
    :func:`guigym.core.paths.check_task_id`; ``Task(...)`` raises :class:`TaskSpecError` naming
    the field and the source file otherwise (``model_validate`` raises pydantic's
    ``ValidationError``, a ``ValueError`` too).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, description="unique id within its suite")
    instruction: str = Field(default="", description="natural-language goal; may be filled at reset (MiniWoB)")
    platform: Platform
    suite: str = Field(description="benchmark suite, e.g. 'miniwob', 'osworld'")
    domain: str = Field(default="", description="app or domain, used for per-domain tables")
    setup: list[dict[str, Any]] = Field(default_factory=list, description="native setup steps")
    evaluator: dict[str, Any] = Field(default_factory=dict, description="native evaluator spec")
    max_steps: int = Field(default=15, gt=0, description="step budget; the episode is truncated after it")
    split: str = "test"
    tags: list[str] = Field(default_factory=list)
    reference: Optional[list[str]] = Field(default=None, description="reference plan as canonical actions")
    source: str = Field(default="", description="file or package the task was loaded from")
    extra: dict[str, Any] = Field(default_factory=dict, description="suite-specific fields")

    def __init__(self, **data: Any) -> None:
        # checked before pydantic so the error is a TaskSpecError, not a ValidationError
        if "id" in data:
            source = data.get("source")
            check_task_id(data["id"], f"{source}: field 'id'" if source else "field 'id'")
        super().__init__(**data)

    @field_validator("id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        return check_task_id(value)
