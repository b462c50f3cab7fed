"""Engine messages in the visitor's language (issue 23): each keyed message a visitor can reach (data files, Hub datasets,
model references, Hub pushes, training errors written by the job, field values gradio could not read) renders in English and
in Portuguese, never with a Python spelling (None, True, ['a']) or an upload's internal hash prefix; the precision reason,
the estimator's make-it-fit changes, choice labels and the batch CSV's headers follow the language too."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from engine import config, i18n  # noqa: F401 - importing config registers the fields' English texts
from engine.errors import ConfigError, DataError, EngineError, HubError, Phrase, for_people, render_record
from engine.fields import from_flat

ROOT = Path(__file__).resolve().parent.parent
HASHED = "0123456789abcdef0123-"  # how engine/views/uploads.py keep_upload names a kept upload
LANGS = ("en", "pt-BR")


def both(exc: EngineError) -> dict[str, str]:
    return {lang: exc.render(lang) for lang in LANGS}


def assert_readable(text: str) -> None:
    """No Python spelling, no unfilled placeholder, no key shown instead of a text, no hash prefix."""
    assert not re.search(r"\bNone\b|\bTrue\b|\bFalse\b|\[\s*'|\{[a-z_]+\}", text), text
    assert not re.match(r"^(error|text|message)\.[a-z_.]+$", text), text
    assert HASHED not in text, text


def raised(fn, *args, **kwargs) -> EngineError:
    with pytest.raises(EngineError) as err:
        fn(*args, **kwargs)
    return err.value


# ---- data files ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("content, en, pt", [
    (b"", "data.jsonl is empty (0 bytes).", "data.jsonl está vazio (0 bytes)."),
    (b"ab\x00cd", "data.jsonl looks like a binary file", "data.jsonl parece um arquivo binário"),
    (b"   \n ", "data.jsonl is empty (only whitespace).", "data.jsonl está vazio (só espaços em branco)."),
    (b"\xff\xfeh\x00i\x00", "encoded as UTF-16", "codificado em UTF-16"),
    (b'{"question": "a", "answer": "b"}\n', "no recognizable columns", "Mapeamento de colunas"),
    (b'{"bad\n', "line 1 is not valid JSON", "a linha 1 não é um JSON válido"),
])
def test_data_file_errors_in_both_languages_without_the_hash_prefix(tmp_path, content, en, pt):
    from engine.data.formats import load_records

    path = tmp_path / f"{HASHED}data.jsonl"
    path.write_bytes(content)
    texts = both(raised(load_records, str(path)))
    assert en in texts["en"] and pt in texts["pt-BR"], texts
    for text in texts.values():
        assert_readable(text)


def test_missing_file_and_unknown_type(tmp_path):
    from engine.data.formats import load_records

    texts = both(raised(load_records, str(tmp_path / f"{HASHED}gone.csv")))
    assert texts == {"en": "Dataset file not found: gone.csv. Upload it again.", "pt-BR": "Arquivo de dados não encontrado: gone.csv. Envie-o de novo."}
    (tmp_path / "book.xlsx").write_text("x")
    texts = both(raised(load_records, str(tmp_path / "book.xlsx")))
    assert "'CSV UTF-8'" in texts["en"] and "Planilhas do Excel" in texts["pt-BR"]


def test_no_column_mapping_target_names_the_columns(tmp_path):
    from engine.data.formats import load_records

    path = tmp_path / "d.jsonl"
    path.write_text('{"question": "a", "answer": "b"}\n', encoding="utf-8")
    texts = both(raised(load_records, str(path), columns={"instruction": "pergunta", "output": "answer"}))
    assert "'pergunta', which is not a column" in texts["en"]
    assert "'pergunta', que não é uma coluna" in texts["pt-BR"] and "'question', 'answer'" in texts["pt-BR"]


def test_hub_dataset_errors(monkeypatch):
    from engine.data import hub

    texts = both(hub._hub_error("owner/name", "hub:owner/name [train]", ConnectionError("offline")))
    assert texts["en"].startswith("Cannot load hub:owner/name [train]: the Hugging Face Hub is not reachable")
    assert texts["pt-BR"].startswith("Não foi possível carregar hub:owner/name [train]: o Hugging Face Hub não está acessível")


def test_uploads_are_named_as_their_owner_knows_them():
    from engine.data.files import display_name
    from engine.refs import shown_file_name

    assert shown_file_name(f"/x/_uploads/abc/{HASHED}my file.csv") == "my file.csv"
    assert shown_file_name("/x/0123-short.csv") == "0123-short.csv"  # not the 20-digit prefix: kept
    assert display_name(f"/x/{HASHED}notes.c") == "notes.c"
    assert display_name("builtin:dates") == "builtin:dates"


# ---- fields: never a Python value ---------------------------------------------------------------------------------

@pytest.mark.parametrize("values, en, pt", [
    ({"learning_rate": None}, "Learning rate (learning_rate): a number is required.", "Taxa de aprendizado (learning_rate): um número é obrigatório."),
    ({"max_steps": ""}, "Max steps (max_steps): a whole number is required.", "Máximo de passos (max_steps): um número inteiro é obrigatório."),
    ({"max_steps": True}, "Max steps (max_steps) = on is not allowed: a whole number.",
     "Máximo de passos (max_steps) = ligado não é permitido: um número inteiro."),
])
def test_a_number_gradio_could_not_read_says_what_is_required(values, en, pt):
    with pytest.raises(ConfigError) as err:
        from_flat(config.TrainConfig, values)
    assert both(err.value) == {"en": en, "pt-BR": pt}


@pytest.mark.parametrize("value", [None, True, False, ["a", "b"], ("x",), {"a": 1}, object(), "t" * 500])
def test_values_are_written_for_people(value):
    for lang in LANGS:
        text = for_people(value, lang, quote=True)
        assert_readable(text)
        assert "<object" not in text and len(text) < 120
    assert ConfigError("lora.targets", ["q", "v"], "x").render("en") == "lora.targets = 'q', 'v' is not allowed: x."


def test_lists_and_numbers_in_keyed_parameters_follow_the_language():
    exc = DataError(key="error.data.too_many_columns", file="f.csv", n=1234, max=1000)
    assert both(exc) == {"en": "f.csv has 1,234 columns; at most 1,000 are read.", "pt-BR": "f.csv tem 1.234 colunas; no máximo 1.000 são lidas."}


# ---- model references, pushes ---------------------------------------------------------------------------------------

def test_model_reference_errors(tmp_path):
    from engine.models.references import resolve_adapter, resolve_model

    texts = both(raised(resolve_model, "not a ref!", tmp_path, False))
    assert "is not a model reference" in texts["en"] and "não é uma referência de modelo" in texts["pt-BR"]
    texts = both(raised(resolve_model, str(tmp_path / "nowhere"), tmp_path, True))
    assert "does not exist" in texts["en"] and "não existe" in texts["pt-BR"]
    texts = both(raised(resolve_adapter, "run:nope", tmp_path, False))
    assert "has no LoRA adapter" in texts["en"] and "não tem adaptador LoRA" in texts["pt-BR"]


def test_hub_push_errors(tmp_path, monkeypatch):
    from engine.export.hub import push_source, resolve_token

    monkeypatch.delenv("HF_TOKEN", raising=False)
    texts = both(raised(resolve_token, "", use_env=False))
    assert "paste it in the token field" in texts["en"] and "cole-o no campo do token" in texts["pt-BR"]
    texts = both(raised(push_source, tmp_path / "nope", "adapter"))
    assert isinstance(raised(push_source, tmp_path / "nope", "adapter"), HubError)
    assert texts == {"en": "There is no run 'nope' to push.", "pt-BR": "Não existe uma execução 'nope' para enviar."}


# ---- what a training job writes, shown later in the visitor's language -------------------------------------------

def test_a_jobs_error_event_is_rendered_in_the_pages_language():
    from engine.views.run_log import event_line

    exc = DataError(key="error.curriculum.no_value", where="d.jsonl", column="level", row=2, unit=Phrase("text.unit.line"))
    record = json.loads(json.dumps(exc.to_record()))  # as events.jsonl stores it
    ev = {"type": "error", "kind": "engine", "message": str(exc), "i18n": record}
    assert "line 2 of d.jsonl" in event_line(ev, "en")
    assert "a linha 2 de d.jsonl" in event_line(ev, "pt-BR")
    # a ConfigError keeps its field's label; an event written before this change shows its text as written
    cfg = ConfigError.of("learning_rate", None, "number", "TrainConfig")
    assert render_record(json.loads(json.dumps(cfg.to_record())), str(cfg), "pt-BR") == "Taxa de aprendizado (learning_rate): um número é obrigatório."
    assert render_record(None, "as written", "pt-BR") == "as written"
    assert render_record({"key": "error.data.empty"}, "as written", "pt-BR") == "{file} está vazio (0 bytes)."  # a missing parameter leaves its slot


def test_out_of_memory_advice_in_both_languages():
    texts = both(EngineError(key="error.train.oom"))
    assert texts["en"].startswith("Out of memory.") and texts["pt-BR"].startswith("Faltou memória.")


# ---- the precision reason, make-it-fit, choices, CSV headers --------------------------------------------------------

def test_precision_reason_in_both_languages(monkeypatch):
    from engine.hardware import cpu_bf16
    from engine.hardware.device import DeviceInfo, precision_reason

    monkeypatch.delenv(cpu_bf16.ENV_FORCE, raising=False)
    monkeypatch.setattr(cpu_bf16, "bf16_speedup", lambda name: 0.4)
    cpu = DeviceInfo("cpu", "slow-cpu", 16.0, False)
    assert precision_reason(cpu, None, "en") == "bf16 is not faster than fp32 on this CPU (0.4x), so auto computes in fp32"
    assert precision_reason(cpu, None, "pt-BR") == "bf16 não é mais rápido que fp32 neste processador (0,4x), então auto calcula em fp32"


def test_make_it_fit_changes_are_words_not_assignments():
    from engine.estimator.texts import Msg, change_msg

    desc = Msg("estimator.fit.together", changes=[change_msg("optimizer", "adamw-8bit"), change_msg("task", "qlora"),
                                                   change_msg("weight_precision", "nf4"), change_msg("double_quant", True)])
    for lang in LANGS:
        text = desc.render(lang)
        assert "=" not in text and "task" not in text and "True" not in text, text
    assert "Task: QLoRA" in desc.render("en") and "Tarefa: QLoRA" in desc.render("pt-BR")
    assert change_msg("task", "full").render("pt-BR") == "Tarefa: ajuste completo"


def test_choice_labels_come_from_the_language_files():
    from engine.fields import field_specs

    for cls in (config.TrainConfig, config.MemoryQuery, config.QuantSettings):
        for spec in field_specs(cls):
            for value in spec.choices or ():
                key = f"text.choice.{cls.__name__}.{spec.name}.{value}"
                if key in i18n.strings("en"):
                    assert key in i18n.strings("pt-BR"), key
    assert i18n.t("text.choice.MemoryQuery.task.inference", "pt-BR") == "inferência (só executar)"
    pytest.importorskip("gradio")
    from ui.widgets import choice_list

    shown = choice_list(config.MemoryQuery, "task", ("inference", "qlora", "nf4-not-a-task"))
    assert [c[1] if isinstance(c, tuple) else c for c in shown] == ["inference", "qlora", "nf4-not-a-task"]  # the values stay
    assert isinstance(shown[0], tuple) and not isinstance(shown[2], tuple)


def test_batch_csv_headers_follow_the_language(tmp_path):
    from engine.inference.batch import write_csv
    from engine.views.playground import table_headers

    rows = [{"prompt": "Olá", "output": "Oi", "tokens": 2, "seconds": 0.123456}]
    out = write_csv(rows, tmp_path / "b.csv", headers=table_headers("batch", "pt-BR")[1:])
    lines = out.read_text(encoding="utf-8-sig").splitlines()
    assert lines[0] == "prompt,resposta,tokens,segundos" and lines[1] == "Olá,Oi,2,0.1235"
    assert write_csv(rows, tmp_path / "e.csv").read_text(encoding="utf-8-sig").splitlines()[0] == "prompt,output,tokens,seconds"


# ---- every keyed message of this block, and the page's toasts ---------------------------------------------------------

def test_every_error_and_text_key_renders_in_both_languages():
    en, pt = i18n.strings("en"), i18n.strings("pt-BR")
    keys = [k for k in en if k.startswith(("error.", "text."))]
    assert len(keys) > 100
    for key in keys:
        assert key in pt, key
        params = {name: "X" for _, name, _, _ in __import__("string").Formatter().parse(en[key]) if name}
        for lang in LANGS:
            text = i18n.t(key, lang, **params)
            assert "{" not in text.replace("{{", "").replace('{"', "") or "{role" in text or "{from" in text or '"data"' in text, (key, text)


# modules whose ConfigErrors also name what is allowed by a language-file key (converted by h23c)
CONFIG_KEYED = ["engine/estimator/model_config.py", "engine/estimator/architecture.py", "engine/estimator/catalog.py",
                "engine/estimator/accuracy.py", "engine/runs.py", "engine/inference/presets.py", "engine/inference/decoding.py",
                "engine/inference/evaluate.py", "engine/inference/batch.py", "engine/export/hub.py", "engine/export/gguf.py",
                "engine/export/gguf_vocab.py", "engine/export/gguf_run.py", "engine/estimator/memory.py", "engine/models/cpu_quant.py",
                "engine/training/adapters.py"]


def test_every_engine_raise_in_the_converted_modules_is_keyed():
    """No plain-text EngineError left in the modules this issue converted (a new one would be English on the Portuguese page)."""
    modules = ["engine/data/files.py", "engine/data/formats.py", "engine/data/hub.py", "engine/data/curriculum.py", "engine/data/build.py",
               "engine/data/pairs.py", "engine/data/preference_rows.py", "engine/data/messages.py",
               "engine/models/references.py", "engine/export/hub.py", "engine/export/gguf_run.py", "engine/export/merge.py", "engine/export/onnx.py", "engine/refs.py",
               *CONFIG_KEYED]
    names = {"EngineError", "DataError", "ModelLoadError", "HubError", "JobError", "MappedColumnsMissing", "GenerationError"}
    plain = []
    for module in modules:
        for node in ast.walk(ast.parse((ROOT / module).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
                if not any(kw.arg == "key" for kw in node.keywords):
                    plain.append(f"{module}:{node.lineno}")
            # a dropped row's reason is a keyed Phrase (the data check shows it in the visitor's language)
            if module.startswith("engine/data/") and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "BadRow":
                first = node.args[0] if node.args else None
                if not (isinstance(first, ast.Call) and isinstance(first.func, ast.Name) and first.func.id == "Phrase") and \
                        not (isinstance(first, ast.Subscript)):  # files.py re-raises a reason it already holds (why.args[0])
                    plain.append(f"{module}:{node.lineno}")
            # a ConfigError names what is allowed by a language-file key (ConfigError.of, allowed_key=, a KeyedConfigError)
            if module in CONFIG_KEYED and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "ConfigError":
                if not any(kw.arg == "allowed_key" for kw in node.keywords):
                    plain.append(f"{module}:{node.lineno}")
    assert plain == []


def test_toasts_have_titles_in_the_visitors_language():
    """gradio's toasts say "Info", "Warning", "Error" unless given a title: every one on the page goes through ui/language.py's
    info/warning/error, which set it from the language files."""
    bare = []
    for path in sorted((ROOT / "ui").glob("*.py")) + [ROOT / "app.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id == "gr" and node.func.attr in ("Info", "Warning", "Error", "Success"):
                if not any(kw.arg == "title" for kw in node.keywords):
                    bare.append(f"{path.name}:{node.lineno}")
    assert bare == []
    assert {i18n.t(f"text.toast.{k}", "pt-BR") for k in ("info", "warning", "error")} == {"Informação", "Atenção", "Erro"}


def test_why_a_row_was_dropped_in_both_languages(tmp_path):
    from engine.data.formats import load_records

    path = tmp_path / "d.jsonl"
    path.write_text('{"instruction": "a", "output": "b"}\n{"instruction": "c", "output": ""}\n', encoding="utf-8")
    records = load_records(str(path))
    (number, why), = records.dropped
    assert (number, str(why)) == (2, "empty 'output'")  # as text (logs, events.jsonl): English
    assert for_people(why, "pt-BR") == "'output' vazio"
    assert json.loads(json.dumps(records.dropped)) == [[2, "empty 'output'"]]
    path.write_text('{"instruction": "c", "output": ""}\n', encoding="utf-8")
    texts = both(raised(load_records, str(path)))
    assert texts["en"] == "d.jsonl: none of the 1 rows can be used as instruction data (line 1: empty 'output')."
    assert texts["pt-BR"] == "d.jsonl: nenhuma das 1 linhas pode ser usada como dados instruction (linha 1: 'output' vazio)."


# ---- the estimator's model errors (an uploaded config.json, an unknown model, the card, the accuracy bands) -----------

def test_estimator_config_json_errors_in_both_languages(tmp_path):
    from engine.estimator.model_config import config_from_dict, resolve

    texts = both(raised(config_from_dict, {"hidden_size": 64}, where="config.json"))
    assert texts == {"en": "config.json has no 'model_type'; is it a transformers config.json?",
                     "pt-BR": "config.json não tem 'model_type'; é mesmo um config.json do transformers?"}
    texts = both(raised(config_from_dict, {"model_type": "no_such_arch_xyz"}, where="config.json"))
    assert "does not know model_type 'no_such_arch_xyz'" in texts["en"] and "não conhece o model_type 'no_such_arch_xyz'" in texts["pt-BR"]
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": 0, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10}')
    texts = both(raised(resolve, str(path)))
    assert "the config's hidden size is 0; it must be a whole number >= 1." in texts["en"]
    assert "o valor de tamanho oculto (hidden size) na configuração é 0" in texts["pt-BR"]
    texts = both(raised(resolve, str(tmp_path / "nowhere" / "config.json")))
    assert texts["en"].startswith("No config.json at") and texts["pt-BR"].startswith("Não há config.json em")
    for text in texts.values():
        assert_readable(text)


def test_estimator_architecture_errors_in_both_languages(tmp_path):
    from engine.estimator.memory import estimate

    t5 = tmp_path / "t5.json"
    t5.write_text(json.dumps({"model_type": "t5", "vocab_size": 100, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4}))
    texts = both(raised(estimate, config.MemoryQuery(model=str(t5), task="full")))
    assert "t5 is an encoder-decoder (seq2seq) model" in texts["en"] and "t5 é um modelo codificador-decodificador (seq2seq)" in texts["pt-BR"]
    texts = both(raised(estimate, config.MemoryQuery(model="tinyllama-1.1b", task="lora", lora_targets="q,nope")))
    assert "module names of this model" in texts["en"] and "nomes de módulos deste modelo" in texts["pt-BR"], texts


def test_estimator_tier_and_accuracy_errors_in_both_languages(monkeypatch, tmp_path):
    from engine.estimator import accuracy
    from engine.estimator.catalog import hardware_tiers, tier_by_name

    err = raised(tier_by_name, "no-such-card")
    names = ", ".join(t.name for t in hardware_tiers())
    assert err.render("en") == f"tier = 'no-such-card' is not allowed: one of {names}."
    assert err.render("pt-BR").endswith(f"{i18n.t('message.allowed.choices', 'pt-BR', choices=names)}.")
    monkeypatch.setattr(accuracy, "ACCURACY_FILE", tmp_path / "bands.yaml")
    accuracy.load_accuracy.cache_clear()
    try:
        (tmp_path / "bands.yaml").write_text("other: 1\n")
        texts = both(raised(accuracy.load_accuracy))
        assert texts == {"en": "bands.yaml has no 'categories' mapping; rerun bench/memory_accuracy.py --write-bands.",
                         "pt-BR": "bands.yaml não tem o mapeamento 'categories'; rode de novo bench/memory_accuracy.py --write-bands."}
    finally:
        accuracy.load_accuracy.cache_clear()


# ---- run configs, the playground's engine ---------------------------------------------------------------------------

def test_run_config_errors_in_both_languages(tmp_path):
    from engine.runs import load_config, run_path

    path = tmp_path / "config.yaml"
    path.write_bytes(b"method: \xff\n")
    texts = both(raised(load_config, path))
    assert texts == {"en": "config = 'config.yaml' is not allowed: UTF-8 text (byte 8 cannot be decoded).",
                     "pt-BR": "config = 'config.yaml' não é permitido: texto em UTF-8 (o byte 8 não pode ser decodificado)."}
    path.write_text("{" * 40 + "}" * 40)
    texts = both(raised(load_config, path))
    assert "(at most 64,000 characters)" in texts["en"] and "(no máximo 64.000 caracteres)" in texts["pt-BR"]
    path.write_text("- a\n- b\n")
    assert "um mapeamento YAML de campos do TrainConfig" in both(raised(load_config, path))["pt-BR"]
    texts = both(raised(run_path, tmp_path, "../x"))
    assert texts["en"].startswith("Run name '../x' is not valid") and texts["pt-BR"].startswith("O nome de execução '../x' não é válido")


def test_playground_engine_errors_in_both_languages(tmp_path):
    from engine.inference.presets import apply_preset

    texts = both(raised(apply_preset, "wild"))
    assert texts["en"].startswith("preset = 'wild' is not allowed: one of ") and "precise" in texts["en"]
    assert texts["pt-BR"].startswith("preset = 'wild' não é permitido: ") and "precise" in texts["pt-BR"]
    for key, params, en, pt in [
        ("error.inference.micro_batch", {"value": "0", "max": 64}, "micro_batch = 0 is not allowed: use 1 to 64.", "micro_batch = 0 não é permitido: use de 1 a 64."),
        ("error.inference.task_n_zero", {}, "n = 0: ask for at least one test item.", "n = 0: peça pelo menos um item de teste."),
        ("error.inference.no_chat_template", {}, "This tokenizer has no chat template", "Este tokenizador não tem template de chat"),
    ]:
        texts = both(EngineError(key=key, **params))
        assert texts["en"].startswith(en) and texts["pt-BR"].startswith(pt), texts


def test_batch_and_task_checks_raise_keyed_messages():
    from engine.inference.batch import batch_generate, parse_prompts
    from engine.inference.evaluate import task_accuracy

    assert raised(lambda: next(batch_generate(None, "a single string", None))).key == "error.inference.prompts_list"
    assert both(raised(lambda: next(batch_generate(None, ["a"], None, micro_batch=0))))["pt-BR"].startswith("micro_batch = 0 não é permitido")
    assert raised(parse_prompts, "   ", None).key == "playground.error.batch_no_prompts"
    err = raised(task_accuracy, None, n=10**9)
    assert err.key == "error.inference.task_n" and "a whole number from 0 to" in err.render("en")
    assert "um número inteiro de 0 a" in err.render("pt-BR")


# ---- the Hub push form's fields, GGUF export ---------------------------------------------------------------------------

def test_hub_push_field_errors_in_both_languages(tmp_path):
    from engine.export.hub import check_repo_id, push_run

    texts = both(raised(check_repo_id, "just-a-name"))
    assert texts["en"].startswith("repo_id = 'just-a-name' is not allowed: owner/name (your user or organization name")
    assert texts["pt-BR"].startswith("repo_id = 'just-a-name' não é permitido: dono/nome (seu usuário ou organização")
    err = raised(push_run, tmp_path / "r", "alice/x", license="Not A License!", token="hf_x")
    assert isinstance(err, ConfigError) and err.render("pt-BR") == ("license = 'Not A License!' não é permitido: um id de licença do Hub como "
                                                                    "apache-2.0, mit ou llama3.1 (vazio = desconhecida, omitida).")
    assert ConfigError("what", "weights", allowed_key="error.hub_fields.what").render("en") == "what = 'weights' is not allowed: adapter, merged or model."


def test_gguf_export_errors_in_both_languages(tmp_path):
    from engine.export.gguf import export_gguf, gguf_support
    from engine.export.gguf_vocab import tokenizer_kind

    reason = gguf_support({"model_type": "gpt_neox"})
    assert isinstance(reason, Phrase) and "this model is gpt_neox" in reason
    assert "este modelo é gpt_neox" in for_people(reason, "pt-BR")
    assert "escalonamento de RoPE 'yarn'" in gguf_support({"model_type": "qwen2", "rope_scaling": {"rope_type": "yarn"}}).render("pt-BR")
    (tmp_path / "config.json").write_text('{"model_type": "gpt_neox"}')
    texts = both(raised(export_gguf, tmp_path, tmp_path / "out"))
    assert "no mapping onto a llama.cpp architecture" in texts["en"] and "arquitetura do llama.cpp" in texts["pt-BR"]
    texts = both(raised(tokenizer_kind, {"model": {"type": "WordPiece"}}))
    assert texts["en"].startswith("GGUF export: the tokenizer is WordPiece") and texts["pt-BR"].startswith("Exportação GGUF: o tokenizador é WordPiece")
    texts = both(EngineError(key="error.gguf.vocab_rows", n=50257, rows=50000))
    assert texts["pt-BR"] == "Exportação GGUF: o tokenizador tem 50.257 tokens, mas o embedding do modelo só tem 50.000 linhas."


def test_the_gguf_note_gives_its_reason_in_the_pages_language(tmp_path):
    from engine.export.gguf_run import gguf_check

    texts = {lang: for_people(gguf_check("ghost", tmp_path), lang) for lang in LANGS}
    assert texts["en"] != texts["pt-BR"], texts
    for text in texts.values():
        assert_readable(text)


# ---- the estimator's query checks, int8-dynamic, LoRA targets of a training run --------------------------------------

def test_estimator_query_errors_in_both_languages():
    from engine.estimator.memory import estimate, query_from_json

    texts = both(raised(query_from_json, {"task": "lora"}))
    assert texts == {"en": "model: a model (preset, catalog name, Hub id or config.json path) is required.",
                     "pt-BR": "model: um modelo (predefinição, nome do catálogo, id do Hub ou caminho de um config.json) é obrigatório."}
    assert "um objeto JSON com pelo menos a chave 'model'" in both(raised(query_from_json, ["x"]))["pt-BR"]
    assert both(raised(estimate, "not a query"))["pt-BR"] == "query = 'str' não é permitido: uma MemoryQuery."


def test_int8_dynamic_refusals_in_both_languages():
    import torch

    from engine.hardware.device import DeviceInfo
    from engine.models.cpu_quant import check_device, quantize_int8_dynamic

    texts = both(raised(check_device, DeviceInfo("cuda", "NVIDIA T4", 15.0, True)))
    assert "torch's dynamic int8 kernels run on the CPU only" in texts["en"]
    assert "os kernels int8 dinâmicos do torch só rodam na CPU" in texts["pt-BR"] and "(NVIDIA T4)" in texts["pt-BR"]
    texts = both(raised(quantize_int8_dynamic, torch.nn.Linear(2, 2).to(torch.bfloat16)))
    assert texts["pt-BR"].endswith("um modelo fp32 na CPU (este está em bfloat16 no dispositivo cpu).")


def test_lora_target_errors_of_a_training_run_in_both_languages():
    import torch

    from engine.training.adapters import lora_targets

    model = torch.nn.Sequential()
    model.add_module("q_proj", torch.nn.Linear(2, 2))
    err = raised(lora_targets, model, "q_proj,nope")
    assert err.render("en") == "lora.targets = 'q_proj,nope' is not allowed: module names that exist in this model: q_proj."
    assert err.render("pt-BR") == "lora.targets = 'q_proj,nope' não é permitido: nomes de módulos que existam neste modelo: q_proj."


def test_an_uploaded_configs_label_follows_the_language(tmp_path):
    from engine.estimator.memory import estimate
    from engine.views.estimate_view import totals_md

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "num_key_value_heads": 4}))
    est = estimate(config.MemoryQuery(model=str(path), task="inference"))
    assert est.model == "config.json (uploaded config)" and for_people(est.model, "pt-BR") == "config.json (config enviado)"
    q = config.MemoryQuery(model=str(path), task="inference")
    assert "config.json (config enviado)" in totals_md(q, est, "pt-BR") and "config.json (uploaded config)" in totals_md(q, est, "en")


# ---- the last texts a visitor could meet in English (visitor_error.*) ----

def test_fp16_refused_for_a_family_in_both_languages():
    from engine.hardware.device import DeviceInfo, resolve_dtype

    t4 = DeviceInfo("cuda", "Tesla T4", 14.58, False, (7, 5))
    with pytest.raises(ConfigError) as err:
        resolve_dtype("fp16", t4, field="precision", model_type="gemma2")
    en, pt = err.value.render("en"), err.value.render("pt-BR")
    assert "fp32 or auto" in en and "Gemma" in en and "https://" in en
    assert "fp32 ou auto" in pt and "o fp16 estoura" in pt and "Gemma" in pt


def test_gpu_busy_curriculum_preset_and_modelfile_in_both_languages():
    from engine.config import TrainConfig
    from engine.data import curriculum
    from engine.errors import GenerationError
    from engine.estimator.recipes import apply_recipe
    from engine.export.modelfile import modelfile_text
    from engine.hardware.coexist import check_room_to_generate

    with pytest.raises(GenerationError) as err:
        check_room_to_generate(8.0, training_run="lora-1", free_gib=2.0)
    assert "is using the GPU" in err.value.render("en") and "está usando a GPU" in err.value.render("pt-BR")
    cfg = TrainConfig(method="scratch", base_model="builtin:compact-mini", dataset="builtin:corpus", curriculum="short-to-long")
    with pytest.raises(ConfigError) as err:
        curriculum.check_applicable(cfg, chunked=True)
    assert "plain-text data" in err.value.render("en") and "texto puro" in err.value.render("pt-BR")
    with pytest.raises(ConfigError) as err:
        apply_recipe({"base_model": "builtin:compact-mini"}, "cpu-64gb", "builtin:compact-mini")  # a card without a recipe
    assert "a card with a recipe" in err.value.render("en") and "uma placa com receita" in err.value.render("pt-BR")
    with pytest.raises(EngineError) as err:
        modelfile_text("m.gguf", None, ['say "stop"'], "balanced", 512)
    assert "double quote" in err.value.render("en") and "aspas duplas" in err.value.render("pt-BR")
