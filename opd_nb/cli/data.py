"""`opd data convert|stats|split`: data helpers on files (core calls in opd_nb.data.jsonl and opd_nb.data.conversion)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from opd_nb.cli._app import app
from opd_nb.cli._output import emit

data_app = typer.Typer(
    name="data",
    help="Convert, describe and split JSONL data for OPD.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
app.add_typer(data_app, name="data")
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]


@data_app.command("convert")
def convert_cmd(
    source: Annotated[Path, typer.Argument(help="input file (JSONL, or a JSON array)")],
    output: Annotated[Path, typer.Argument(help="output JSONL in Bailian's OPD format")],
    source_format: Annotated[
        str, typer.Option("--from", help="sharegpt | alpaca | openai-chat | prompt-completion")
    ],
    system: Annotated[str | None, typer.Option(help="a system message for rows without one")] = None,
    solution_field: Annotated[
        str | None,
        typer.Option(help="the record field (dotted) that holds the ground truth (default: the answer)"),
    ] = None,
    as_json: JsonOpt = False,
) -> Any:
    """Write Bailian's OPD rows from another format; reports each dropped row and why."""
    from opd_nb.data.conversion import convert

    result = convert(
        source, output, source_format=source_format, system=system, solution_field=solution_field
    )
    return emit(result, as_json=as_json, exit_code=0 if result.ok else 1)


@data_app.command("stats")
def stats_cmd(
    path: Annotated[Path, typer.Argument(help="an OPD JSONL file")],
    tokenizer: Annotated[
        str | None, typer.Option(help="a tokenizer folder for exact prompt token counts")
    ] = None,
    as_json: JsonOpt = False,
) -> Any:
    """Rows, rows with a solution, role patterns and prompt lengths of a JSONL file."""
    from opd_nb.data.jsonl import stats

    return emit(stats(path, tokenizer_path=tokenizer), as_json=as_json)


@data_app.command("split")
def split_cmd(
    path: Annotated[Path, typer.Argument(help="an OPD JSONL file")],
    out: Annotated[Path, typer.Option("--out", help="folder for train.jsonl and validation.jsonl")],
    validation: Annotated[
        float, typer.Option(help="validation share (0-1) or a number of prompts (>= 1)")
    ] = 0.1,
    seed: Annotated[int, typer.Option(help="shuffle seed (the split is deterministic)")] = 0,
    as_json: JsonOpt = False,
) -> Any:
    """Split into train/validation with no prompt on both sides."""
    from opd_nb.data.jsonl import split_file

    size: float | int = int(validation) if validation >= 1 else validation
    return emit(split_file(path, out, size, seed=seed), as_json=as_json)
