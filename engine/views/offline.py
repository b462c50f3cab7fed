"""Hub models on an app without the internet: which references need a download, how the page marks them (the estimator's
model list, the hand-off to Fine-tune, the fine-tune form), and the alternative it offers: the built-in compact model,
shipped pretrained with the app, which trains the scored date task offline (the first run's settings).

Whether the app is online is decided in one place, engine/models/hub_access.py (`hub_online`: the environment, then
one short, remembered connection to the Hub); a model already in the local Hugging Face cache loads offline and is not
marked."""

from __future__ import annotations

from ..estimator.catalog import catalog_lookup
from ..i18n import t
from ..models.hub_access import hub_online, needs_internet
from ..refs import BUILTIN_PREFIX, HUB_MODEL_ID_RE, RUN_PREFIX

OFFLINE_MODEL = "builtin:compact-mini"  # the offline alternative: the Fine-tune form's default (engine/views/finetune_form.py)


def hub_id_of(ref: str | None) -> str | None:
    """The Hugging Face repo a model reference downloads from: a Hub id as typed, a catalog name's (or a loosely written
    name's) repo; None for what never downloads (built-in models, runs, architectures, files and folders)."""
    ref = str(ref or "").strip()
    if not ref or ref.startswith((BUILTIN_PREFIX, RUN_PREFIX, "manual:", "/", "~", ".")) or ref.endswith(".json"):
        return None
    entry = catalog_lookup(ref)
    if entry is not None and "/" not in ref:
        return entry.hf_id  # a catalog short name names no repo of its own
    return ref if HUB_MODEL_ID_RE.match(ref) else None


def needs_internet_now(ref: str | None, online: bool | None = None) -> bool:
    """Whether the model `ref` would be downloaded from the Hub, and this app cannot do that now (hub_access)."""
    repo = hub_id_of(ref)
    return repo is not None and needs_internet(repo, online)


def marked(label: str, ref: str, online: bool, lang: str = "en") -> str:
    """A model list's label, with "needs the internet" after it when the model would have to be downloaded offline."""
    return f"{label} · {t('hub_offline.mark', lang)}" if not online and needs_internet_now(ref, online) else label


def offline_note(ref: str | None, lang: str = "en", online: bool | None = None) -> str:
    """A warning line for a model that needs the internet this app does not have, with the offline alternative; "" for a
    model that loads now."""
    if not needs_internet_now(ref, online):
        return ""
    return "⚠ " + t("hub_offline.note", lang, model=str(ref).strip(), builtin=OFFLINE_MODEL)


def online_now() -> bool:
    """hub_online(), for callers that mark a whole list with one answer."""
    return hub_online()


def handoff_warning(ref: str | None, lang: str = "en") -> str:
    """What "Use these settings in Fine-tune" says instead of its plain confirmation when the model it copies needs the
    internet this app does not have: the settings are copied, and the built-in model is offered. "" otherwise."""
    if not needs_internet_now(ref):
        return ""
    return t("hub_offline.copied", lang, model=str(ref).strip(), builtin=OFFLINE_MODEL)


def marked_choices(refs: list[str], lang: str = "en", online: bool | None = None) -> list[tuple[str, str]]:
    """A list of model references as (label, value) choices, the ones that would need the internet marked (the Fine-tune
    form's base and teacher models). online: hub_online()'s answer, asked once here when not given."""
    online = online_now() if online is None else online
    return [(marked(ref, ref, online, lang), ref) for ref in refs]
