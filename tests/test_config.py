"""params.yaml validation: every mistake is one line naming the key and what would be valid."""

import copy
from pathlib import Path

import pytest
import yaml

from gpt1.cli.main import main
from gpt1.pipeline.config import load_config, pretrain_settings, validate
from gpt1.pipeline.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
PARAMS = yaml.safe_load((REPO / "params.yaml").read_text())


def broken(change) -> dict:
    root = copy.deepcopy(PARAMS)
    change(root)
    return root


def error_of(root: dict) -> str:
    with pytest.raises(ConfigError) as info:
        validate(root)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_the_repository_params_are_valid_for_every_profile():
    for profile in PARAMS["profiles"]:
        cfg = load_config(REPO / "params.yaml", profile)
        assert cfg.profile == profile
        assert cfg.p["model"]["n_embd"] % cfg.p["model"]["n_head"] == 0


def test_paper_profile_is_the_papers_recipe():
    paper = load_config(REPO / "params.yaml", "paper").p
    assert paper["model"] == {
        "n_layer": 12, "n_embd": 768, "n_head": 12, "n_ctx": 512, "dropout": 0.1, "lstm_hidden": 2048}
    assert paper["bpe"]["merges"] == 40000 and paper["bpe"]["pretokenizer"] == "spacy"
    pre = paper["pretrain"]
    assert (pre["lr"], pre["warmup_steps"], pre["batch_size"], pre["epochs"]) == (2.5e-4, 2000, 64, 100)
    assert (pre["betas"], pre["eps"], pre["weight_decay"]) == ([0.9, 0.999], 1e-8, 0.01)



def test_gpu_profile_is_the_papers_model_and_finetuning_with_shorter_pretraining():
    from gpt1.training.pretraining import make_plan

    paper, gpu = (load_config(REPO / "params.yaml", name).p for name in ("paper", "gpu"))
    assert gpu["model"] == paper["model"] and gpu["bpe"] == paper["bpe"]
    assert gpu["finetune"] == paper["finetune"]  # lr 6.25e-5, batch 32, 3 epochs, λ 0.5, no caps
    assert (gpu["finetune"]["max_train_examples"], gpu["finetune"]["max_eval_examples"]) == (None, None)
    same = ("batch_size", "lr", "warmup_steps", "betas", "eps", "weight_decay", "compile", "precision")
    assert {k: gpu["pretrain"][k] for k in same} == {k: paper["pretrain"][k] for k in same}
    # max_steps ends pre-training on either corpus: the mirror's ~12.8M tokens allow 100 epochs = 39k updates
    for corpus_tokens in (12_800_000, 250_000_000):
        assert make_plan(gpu["pretrain"], gpu["model"]["n_ctx"], corpus_tokens, 1).total_steps == 30_000

def test_unknown_key_is_named_with_the_valid_ones():
    message = error_of(broken(lambda r: r["profiles"]["smoke"]["bpe"].update(merge=3)))
    assert "profiles.smoke.bpe.merge" in message and "merges" in message


def test_unknown_top_level_key():
    assert "unknown key profle" in error_of(broken(lambda r: r.update(profle="x")))


def test_wrong_type_names_key_and_expected_type():
    message = error_of(broken(lambda r: r["profiles"]["default"]["model"].update(n_layer="four")))
    assert "profiles.default.model.n_layer" in message and "integer" in message


def test_missing_profile_lists_the_defined_ones():
    message = error_of(broken(lambda r: r.update(profile="huge")))
    assert "'huge'" in message and "smoke" in message and "paper" in message


def test_heads_must_divide_width():
    message = error_of(broken(lambda r: r["profiles"]["paper"]["model"].update(n_head=7)))
    assert "profiles.paper.model.n_embd" in message and "n_head=7" in message


def test_vocabulary_must_fit_the_token_dtype():
    message = error_of(broken(lambda r: r["profiles"]["paper"]["bpe"].update(merges=70000)))
    assert "profiles.paper.bpe.merges" in message and "uint16" in message and "uint32" in message


def test_negative_learning_rate():
    message = error_of(broken(lambda r: r["profiles"]["default"]["pretrain"].update(lr=-1e-4)))
    assert "profiles.default.pretrain.lr" in message and "-0.0001" in message


def test_bad_enum_lists_choices():
    message = error_of(broken(lambda r: r["profiles"]["smoke"]["bpe"].update(pretokenizer="bert")))
    assert "'bert' is not one of spacy, openai, fast" in message


def test_overrides_apply_to_the_selected_profile(tmp_path):
    cfg = load_config(REPO / "params.yaml", "smoke", ["bpe.merges=123", "corpus.max_documents=null"])
    assert cfg.p["bpe"]["merges"] == 123 and cfg.p["corpus"]["max_documents"] is None
    with pytest.raises(ConfigError, match=r"bpe\.merges: 'many'"):
        load_config(REPO / "params.yaml", "smoke", ["bpe.merges=many"])
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        load_config(REPO / "params.yaml", "smoke", ["bpe.merges"])


def test_cli_reports_config_errors_in_one_line(capsys):
    assert main(["config", "--params", str(REPO / "params.yaml"), "--profile", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpt1: config error: profile: 'nope' is not defined") and "\n" not in err


def test_missing_params_file(tmp_path):
    with pytest.raises(ConfigError, match="params file not found"):
        load_config(tmp_path / "params.yaml")


def test_a_per_task_training_cap_names_the_task_or_the_bound_it_breaks():
    with pytest.raises(ConfigError, match=r"finetune\.train_examples_by_task: 'foo' is not one of snli"):
        load_config(REPO / "params.yaml", "default", ["finetune.train_examples_by_task={foo: 3}"])
    with pytest.raises(ConfigError, match=r"finetune\.train_examples_by_task\.sst2: 0 is less than the minimum of 1"):
        load_config(REPO / "params.yaml", "default", ["finetune.train_examples_by_task={sst2: 0}"])


def test_a_per_task_lr_names_the_task_or_the_bound_it_breaks():
    with pytest.raises(ConfigError, match=r"finetune\.lr_by_task: 'foo' is not one of snli"):
        load_config(REPO / "params.yaml", "default", ["finetune.lr_by_task={foo: 1.0e-4}"])
    with pytest.raises(ConfigError, match=r"finetune\.lr_by_task\.cola: 0 is less than or equal to the minimum"):
        load_config(REPO / "params.yaml", "default", ["finetune.lr_by_task={cola: 0}"])


def test_a_model_kind_overrides_only_the_pretrain_keys_it_names():
    cfg = load_config(REPO / "params.yaml", "smoke",
                      ["pretrain.by_model={lstm: {batch_size: 16, micro_batch_size: 16, max_steps: 7}}"])
    gpt, lstm = pretrain_settings(cfg, "gpt"), pretrain_settings(cfg, "lstm")
    assert "by_model" not in gpt and "by_model" not in lstm
    assert (lstm["batch_size"], lstm["micro_batch_size"], lstm["max_steps"]) == (16, 16, 7)
    assert gpt == {key: value for key, value in cfg.section("pretrain").items() if key != "by_model"}
    assert {k: v for k, v in lstm.items() if k not in ("batch_size", "micro_batch_size", "max_steps")} == \
        {k: v for k, v in gpt.items() if k not in ("batch_size", "micro_batch_size", "max_steps")}


def test_a_bad_per_model_pretrain_override_names_its_key():
    with pytest.raises(ConfigError, match=r"pretrain\.by_model\.lstm\.batch_size: 32 is not a multiple of"):
        load_config(REPO / "params.yaml", "smoke", ["pretrain.by_model={lstm: {batch_size: 32, micro_batch_size: 5}}"])
    with pytest.raises(ConfigError, match=r"unknown key profiles\.smoke\.pretrain\.by_model\.lstm\.seed"):
        load_config(REPO / "params.yaml", "smoke", ["pretrain.by_model={lstm: {seed: 3}}"])
    with pytest.raises(ConfigError, match=r"pretrain\.by_model"):
        load_config(REPO / "params.yaml", "smoke", ["pretrain.by_model={rnn: {lr: 0.1}}"])


def test_a_bad_finetune_dropout_names_its_key():
    with pytest.raises(ConfigError, match=r"profiles\.default\.finetune\.dropout: 1\.0"):
        load_config(REPO / "params.yaml", "default", ["finetune.dropout=1.0"])
    assert load_config(REPO / "params.yaml", "default", ["finetune.dropout=null"]).p["finetune"]["dropout"] is None


def test_a_bad_length_group_names_its_key():
    with pytest.raises(ConfigError, match=r"profiles\.default\.finetune\.length_group_batches: 0"):
        load_config(REPO / "params.yaml", "default", ["finetune.length_group_batches=0"])


def test_the_schemas_task_lists_are_the_codes():
    """params.schema.yaml spells each task list out once, in $defs (the data stages load params without
    gpt1.data.tasks); they are the fine-tuning tasks (gpt1.data.tasks) and Table 5's GLUE tasks
    (gpt1.evaluation.metrics), and no other enum names a task."""
    from gpt1.data.tasks import FINETUNE_TASKS
    from gpt1.evaluation.metrics import GLUE_COMPONENTS
    from gpt1.pipeline.config import SCHEMA_PATH

    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    assert schema["$defs"]["finetune_task"]["enum"] == list(FINETUNE_TASKS)
    assert sorted(schema["$defs"]["glue_task"]["enum"]) == sorted(GLUE_COMPONENTS)
    assert SCHEMA_PATH.read_text().count("rte") == 2


def test_a_task_the_code_does_not_know_is_named_with_the_valid_ones():
    message = error_of(broken(lambda r: r["profiles"]["smoke"]["finetune"].update(lr_by_task={"sst3": 1e-4})))
    assert "'sst3' is not one of snli, mnli, qnli" in message
    message = error_of(broken(lambda r: r.update(ablation_tasks=["rte", "race"])))
    assert "ablation_tasks.1: 'race' is not one of cola, sst2, mrpc" in message


def test_a_sample_snapshot_beyond_the_profiles_snapshots_names_the_key():
    cfg = load_config(REPO / "params.yaml", "smoke", ["samples.snapshots=[0, -4, 3]"])  # smoke: 4 snapshots
    assert cfg.p["samples"]["snapshots"] == [0, -4, 3]
    for bad in ("4", "-5"):
        with pytest.raises(ConfigError, match=rf"profiles\.smoke\.samples\.snapshots: {bad} is no snapshot of "
                                              rf"pretrain\.snapshots=4; give indices from -4 to 3"):
            load_config(REPO / "params.yaml", "smoke", [f"samples.snapshots=[0, {bad}]"])
    with pytest.raises(ConfigError, match=r"samples\.prompts"):
        load_config(REPO / "params.yaml", "smoke", ["samples.prompts=[]"])


@pytest.mark.parametrize("override", ["pretrain.seed=4294967296", "samples.seed=18446744073709551616",
                                      "zeroshot.seed=-1"])
def test_a_seed_beyond_what_the_libraries_take_is_refused_by_the_schema(override):
    """Every seed of params.yaml is the schema's one $defs/seed, 0..2**32-1 as the CLI's --seed: a larger one passed
    `gpt1 config` and failed at its stage (an overflow traceback, or after the whole pipeline at fine-tuning)."""
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"profiles\.smoke\.{key}: .* (greater than the maximum of 4294967295|"
                                          r"less than the minimum of 0)"):
        load_config(REPO / "params.yaml", "smoke", [override])
    message = error_of(broken(lambda r: r.update(seeds=[0, 4294967296])))
    assert "seeds.1: 4294967296 is greater than the maximum of 4294967295" in message


def test_the_schemas_seed_is_the_clis():
    from gpt1.cli.preflight import MAX_SEED
    from gpt1.pipeline.config import SCHEMA_PATH

    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    assert (schema["$defs"]["seed"]["minimum"], schema["$defs"]["seed"]["maximum"]) == (0, MAX_SEED)
    seeds = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            seeds.extend(value for key, value in node.get("properties", {}).items() if key == "seed")
            for value in node.values():
                walk(value)

    walk(schema)
    assert len(seeds) == 5 and all(seed == {"$ref": "#/$defs/seed"} for seed in seeds)  # none spelled out beside it


def test_params_yaml_is_written_as_dvc_writes_it(tmp_path):
    """`dvc exp run -S key=value` rewrites params.yaml through DVC's YAML dumper: in its style already, an
    experiment's diff is the one value (it was 208 lines of re-wrapped lists, nulls and quotes)."""
    import difflib
    import shutil

    from dvc.utils.serialize import modify_yaml

    source, written = REPO / "params.yaml", tmp_path / "params.yaml"
    shutil.copy(source, written)
    with modify_yaml(written) as data:
        data["profiles"]["default"]["finetune"]["lr"] = 0.000123
    diff = difflib.unified_diff(source.read_text().splitlines(), written.read_text().splitlines(), lineterm="", n=0)
    changed = [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    relayout = ("python -c \"from dvc.utils.serialize import modify_yaml; m = modify_yaml('params.yaml'); "
                "m.__enter__(); m.__exit__(None, None, None)\"")
    assert len(changed) == 2 and changed[1] == "+      lr: 0.000123", f"lay params.yaml out as DVC does: {relayout}"


def test_a_zero_shot_reference_whose_best_is_no_better_than_chance_is_refused():
    message = error_of(broken(lambda r: r["zeroshot_reference"]["sst2"].update(sota=0.5, random=0.5)))
    assert message == "zeroshot_reference.sst2.sota: 0.5 must exceed random=0.5"
