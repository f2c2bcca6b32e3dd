"""A model trained outside compose-lens, as a researcher brings it: what its records say of where it came
from, the config file names it may be saved under, and what a command that cannot read it says."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from compose_lens.cli import main
from compose_lens.core.errors import ComposeLensError
from compose_lens.training.runs import find_checkpoints
from compose_lens.training.subject import load_subject
from tests import user_models


def test_its_records_say_where_it_came_from_and_invent_no_recipe(tmp_path, capsys):
    """Every record of such a model held compose-lens's defaults as if it had trained it (lr 0.001, weight decay,
    30,000 steps, seed 42, f 0.7 for a split that holds out nothing). Now: the weights file, its SHA-256 and the
    declaration; no train section, no split or initialisation keys."""
    decl = user_models.declaration(heldout_pairs=((0, 1),))
    folder = user_models.save(user_models.tl_model(decl), decl, tmp_path / "mine")
    assert main(["evaluate", str(folder), "--pool-size", "8", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)["provenance"]["config"]
    assert "train" not in record and not {"f", "r", "seed"} & set(record["task"])
    assert not {"init", "init_seed"} & set(record["model"])
    origin = record["origin"]
    assert origin["weights"] == str(folder / "model.safetensors")
    assert origin["sha256"] == hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert origin["declaration"] == decl.to_dict() and origin["trained"].startswith("outside compose-lens")
    # an analysis's files carry the same record (context's provenance reads the config)
    from compose_lens.report.context import run_analysis

    run_analysis("attention", load_subject(folder), tmp_path / "att", sequences=["p=3, q=4, p+q=?"])
    written = json.loads((tmp_path / "att" / "attention.provenance.json").read_text())
    assert written["config"] == record
    # a compose-lens model keeps its recipe
    assert "train" in load_subject("paper").config.to_dict()


def test_a_model_object_records_the_hash_of_its_weights():
    decl = user_models.declaration()
    model = user_models.tl_model(decl)
    first = load_subject(model, decl).config.origin
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    assert load_subject(model, decl).config.origin.sha256 != first.sha256 and "object in Python" in first.weights


def test_a_config_saved_as_tl_config_json_is_read(tmp_path):
    decl = user_models.declaration()
    folder = user_models.save(user_models.tl_model(decl), decl, tmp_path / "mine", config_name="tl_config.json")
    assert load_subject(folder).task.modulus == user_models.P
    (folder / "tl_config.json").unlink()
    with pytest.raises(ComposeLensError, match="config.json or tl_config.json") as info:
        load_subject(folder)
    assert "\n" not in str(info.value)


def test_a_run_analysis_of_a_model_directory_says_it_reads_checkpoints(tmp_path):
    decl = user_models.declaration()
    folder = user_models.save(user_models.tl_model(decl), decl, tmp_path / "mine")
    with pytest.raises(ComposeLensError, match="holds one model, not a run's checkpoints"):
        find_checkpoints(folder)


def test_the_default_attention_views_cover_every_kind_when_nothing_is_held_out():
    """``attention MODEL`` with no sequences drew one sequence for a model trained on every pair (only the
    1-var training pool of the four example pools was present); now one of each kind."""
    from compose_lens.data.sampler import example_pools, example_sequences
    from compose_lens.data.declaration import NOTHING_HELD_OUT

    nothing = user_models.declaration(**NOTHING_HELD_OUT).split()
    assert example_pools(nothing) == ("0var_train", "1var_train", "2var_train")
    assert len(example_sequences(nothing)) == 3
    assert example_pools(user_models.declaration().split()) == (
        "0var_add_restricted", "1var_train", "2var_add_restricted", "2var_var_restricted_2")


def test_the_users_names_print_and_parse(tmp_path, capsys):
    """``variable_names`` (and the declared number and operator names) are how sequences print and parse:
    ``attention MODEL 'p=3, q=4, p-q=?'`` was refused ("unknown variable 'p': the variables are a..e") and
    every output printed a..e."""
    from compose_lens.data.sampler import make_pool
    from compose_lens.data.task import parse_sequence, to_text, token_name

    decl = user_models.declaration(operation="subtract")
    folder = user_models.save(user_models.tl_model(decl), decl, tmp_path / "mine")
    assert main(["attention", str(folder), "p=3, q=4, p-q=?", "--out", str(tmp_path / "att")]) == 0
    assert "p=3, q=4, p-q=?" in capsys.readouterr().out
    task = load_subject(folder).task
    shown = to_text(task, make_pool(decl.split(), "2var_train", 1).tokens[0].tolist())
    assert set(shown.split(", ")[-1][:-2].split("-")) <= set("pqrst")  # 2-var query: two of the user's names
    words = ("zero", "one", "two", "three", "four", "five", "six")
    named = user_models.declaration(number_names=words, operator_name="minus", operation="subtract").task
    tokens = parse_sequence(named, "p=three, q=one, p minus q=?")
    assert to_text(named, tokens) == "p=three, q=one, p minus q=?"
    assert [token_name(named, t) for t in tokens[-4:]] == ["minus", "p", "q", "="]
    with pytest.raises(ComposeLensError, match="unknown word '3'"):
        parse_sequence(named, "p=3, p minus one=?")


@pytest.mark.parametrize("keys, message", [
    ({"number_names": ("a", "b")}, "2 words for 7 numbers"),
    ({"number_names": ("p", "1", "2", "3", "4", "5", "6")}, "spell \\['p'\\] for two tokens"),
    ({"operator_name": "= "}, "operator name"),
    ({"variable_names": ("p", "q", "r", "s", "9t")}, "variable name '9t'"),
])
def test_names_that_cannot_be_read_back_are_refused(keys, message):
    from compose_lens.data.declaration import DeclarationError

    with pytest.raises(DeclarationError, match=message) as info:
        user_models.declaration(**keys)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("keys, message", [
    ({"number_names": "zero one"}, 'number_names="zero one": must be a list of strings, not a string'),
    ({"operator_name": 5}, "operator_name=5: must be a string or null"),
    ({"fewest_assignments": 1.5}, "fewest_assignments=1.5: must be an integer"),
    ({"fewest_assignments": True}, "fewest_assignments=true: must be an integer"),
    ({"padding": ["left"]}, "padding=\\[\"left\"\\]: must be a string"),
    ({"kind_weights": "1,1,1"}, 'kind_weights="1,1,1": must be a list of numbers'),
    ({"kind_weights": [1, float("nan"), 1]}, "kind_weights=.*its item .* is a non-finite number"),
    ({"kind_weights": [1, "1", 1]}, 'kind_weights=.*its item "1" is a string'),
])
def test_the_context_and_name_keys_are_typed_like_every_key(keys, message):
    """The keys of issue 54 (the names, the context distribution) are checked whole with the others (issue 59):
    a string is never read letter by letter, a bool is not an integer, a weight is a finite number; in Python
    and in a file alike."""
    from compose_lens.data.declaration import DeclarationError, TaskDeclaration

    with pytest.raises(DeclarationError, match=message) as info:
        user_models.declaration(**keys)
    assert "\n" not in str(info.value)
    data = {**user_models.declaration().to_dict(), **json.loads(json.dumps(keys, allow_nan=True))}
    with pytest.raises(DeclarationError, match="task.json: " + message):
        TaskDeclaration.from_dict(data, "task.json")


def test_more_than_26_variables_need_their_names():
    """a..z name 26 variables; a declaration of more names them all (and they print and parse), one of more
    without names, or of more than MAX_VARIABLES (a task's 2-var pairs are n x n), is refused in one line."""
    from compose_lens.core.config import MAX_VARIABLES
    from compose_lens.data.task import parse_sequence, to_text
    from compose_lens.data.declaration import DeclarationError, TaskDeclaration

    def declare(n: int, **keys) -> TaskDeclaration:
        return TaskDeclaration(modulus=7, numbers=tuple(range(7)), variables=tuple(range(10, 10 + n)), operator=7,
                               equals=8, pad=9, vocab_size=10 + n, seq_len=12, max_assignments=3, **keys)

    named = declare(30, variable_names=tuple(f"x{i}" for i in range(30))).task
    assert to_text(named, parse_sequence(named, "x29=3, x0=4, x29+x0=?")) == "x29=3, x0=4, x29+x0=?"
    with pytest.raises(DeclarationError, match="variables: 30 ids, but the default names a..z name 26"):
        declare(30)
    with pytest.raises(DeclarationError, match=f"variables: {MAX_VARIABLES + 1} ids; give between 2 and"):
        declare(MAX_VARIABLES + 1, variable_names=tuple(f"x{i}" for i in range(MAX_VARIABLES + 1)))


def test_the_seed_beside_heldout_pairs_chooses_the_2var_rows_where_r_is_below_1():
    """With r < 1 the seed chooses which 2-var rows each training pair keeps, listed pairs or not: it was reset
    to 42 beside heldout_pairs, so a model trained with seed 5 was read with seed 42's rows. It stays, and a
    file holds it; with r = 1 it chooses nothing and is not written."""
    from compose_lens.data.declaration import TaskDeclaration

    pairs = ((0, 1), (2, 3))
    five, default = (user_models.declaration(heldout_pairs=pairs, r=0.5, seed=s) for s in (5, 42))
    assert five.seed == 5 and not torch.equal(five.split().two_var_counts, default.split().two_var_counts)
    assert five.to_dict()["split"]["seed"] == 5 and TaskDeclaration.from_dict(five.to_dict(), "task.json") == five
    whole = user_models.declaration(heldout_pairs=pairs, seed=5)
    assert "seed" not in whole.to_dict()["split"] and TaskDeclaration.from_dict(whole.to_dict(), "t.json") == whole


def test_a_prompt_file_reads_every_form_in_the_researchers_coordinates(tmp_path):
    """The short form, the researcher's token ids and their token form in their own (infix) order give the
    same sequence in the study's coordinates; each lands in the pool its pair and slots say; a wrong answer or
    an id the task does not use is one line naming the file's line."""
    from compose_lens.data.prompts import read_prompts
    from compose_lens.data.sampler import make_pool
    from compose_lens.data.task import decode, to_text, token_name

    decl = user_models.declaration(query="infix", output="vocab", unused=2, operation="subtract")
    split, task = decl.split(), decl.task
    batch = make_pool(split, "1var_var_restricted", 1, seed=3)
    study = batch.tokens[0]
    user = decl.to_user(study[None])[0].tolist()
    words = " ".join(token_name(task, study[i].item()) for i in _inverse(decl.positions))  # their order
    answer = int(batch.labels[0])
    lines = [{"sequence": to_text(task, study.tolist()), "answer": answer}, {"sequence": user, "answer": answer},
             {"sequence": " ".join(map(str, user)), "answer": answer}, {"sequence": words, "answer": answer}]
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    read = read_prompts(tmp_path / "p.jsonl", split, decl)
    assert all(row.tolist() == study.tolist() for row in read.tokens[1:])  # ids and token form: exactly
    assert decode(task, read.tokens[0].tolist()) == decode(task, study.tolist())  # the short form drops PAD places
    assert read.pools == ("1var_var_restricted",) * 4 and read.rows[0].tolist() == batch.rows[0].tolist()
    (tmp_path / "bad.csv").write_text(f'sequence,answer\n"{to_text(task, study.tolist())}",{(answer + 1) % 7}\n')
    with pytest.raises(ComposeLensError, match=r"bad.csv line 2: the answer is") as info:
        read_prompts(tmp_path / "bad.csv", split, decl)
    assert "\n" not in str(info.value)
    unused = next(i for i in range(decl.vocab_size) if i not in decl.token_ids.tolist())
    (tmp_path / "id.jsonl").write_text(json.dumps({"sequence": [unused] + user[1:], "answer": answer}))
    with pytest.raises(ComposeLensError, match=rf"id.jsonl line 1: .*token id\(s\) \[{unused}\] are not ids"):
        read_prompts(tmp_path / "id.jsonl", split, decl)


def _inverse(positions):
    """The study position each of the researcher's positions holds."""
    return [positions.index(i) for i in range(len(positions))]


def test_the_declared_context_distribution_is_rendered():
    """How many assignments, where the padding goes and the mix of kinds, as declared (the study's by default,
    unchanged bit for bit: tests/unit/test_study_distribution.py)."""
    from compose_lens.data.sampler import TrainingSampler, make_pool

    for padding in ("left", "right"):
        decl = user_models.declaration(padding=padding, fewest_assignments=3, kind_weights=(0, 0, 1))
        task = decl.task
        pad = task.pad_token
        batch = TrainingSampler(decl.split(), 64, 0).batch(0)
        context = batch.tokens[:, :task.context_len]
        assert (context != pad).sum(1).eq(6).all()  # exactly 3 assignments: fewest = max = 3
        is_pad = (context == pad).long()
        expected = torch.tensor([1, 1, 0, 0, 0, 0, 0, 0] if padding == "left" else [0, 0, 0, 0, 0, 0, 1, 1])
        assert (is_pad == expected).all()
        assert (batch.tokens[:, -3:-1] >= task.first_var_token).all()  # every sequence 2-var: kind_weights
        assert (make_pool(decl.split(), "0var_train", 16).tokens[:, :task.context_len] == pad).long().eq(
            expected).all()
    with pytest.raises(ComposeLensError, match="padding='middle'"):
        user_models.declaration(padding="middle")
