"""The notebook -> package exporter: in sync, idempotent, and strict about its rules."""

import shutil
from pathlib import Path

import nbformat
import pytest

from tools import export
from tools.notebooks import BookError, read_book

ROOT = Path(__file__).resolve().parent.parent


def make_chapter(directory: Path, name: str, *cells: str) -> Path:
    """Write a notebook of code cells (a str starting with '# md' becomes markdown)."""
    nb = nbformat.v4.new_notebook()
    for source in cells:
        if source.startswith("# md "):
            nb.cells.append(nbformat.v4.new_markdown_cell(source[5:]))
        else:
            nb.cells.append(nbformat.v4.new_code_cell(source))
    path = directory / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.fixture
def book(tmp_path):
    """A two-chapter book in a temporary folder; returns (chapters dir, package dir)."""
    chapters, package = tmp_path / "chapters", tmp_path / "pkg"
    chapters.mkdir()
    make_chapter(
        chapters, "01_first",
        "# md # 01 · First steps",
        "#| default_exp first",
        '#| export\nSCALE = 2\n\n\ndef double(x):\n    """x -> 2x."""\n    return SCALE * x',
        "print(double(3))  # narrative, not exported",
    )
    make_chapter(
        chapters, "02_second",
        "# md # 02 · Second",
        "#| default_exp second",
        '#| export\nfrom transformer.first import double\n\n\nclass Quad:\n'
        '    """x -> 4x.\n\n    Shapes: any.\n    """\n\n    def __call__(self, x):\n'
        '        return double(double(x))\n\n\ndef _helper():\n    return None',
    )
    return chapters, package


def run(chapters: Path, package: Path, *flags: str) -> int:
    return export.main([*flags, "--chapters", str(chapters), "--package", str(package)])


def test_repository_package_is_in_sync_with_the_notebooks():
    assert export.main(["--check"]) == 0


def test_export_writes_modules_all_and_chapter_stamps(book):
    chapters, package = book
    assert run(chapters, package) == 0
    first = (package / "first.py").read_text()
    assert first.startswith(export.HEADER_PREFIX) and "01_first.ipynb" in first.splitlines()[0]
    assert '__all__ = ["SCALE", "double"]' in first
    assert "    Defined in chapter 01 (`" in first and "01_first.ipynb`).\n" in first
    assert "print(double(3))" not in first  # only `#| export` cells go to the package
    second = (package / "second.py").read_text()
    assert '__all__ = ["Quad"]' in second  # _helper is private
    assert "    Shapes: any.\n\n    Defined in chapter 02 (`" in second and "02_second.ipynb`).\n" in second
    init = (package / "__init__.py").read_text()
    assert init.index("from transformer.first") < init.index("from transformer.second")


def test_export_is_idempotent(book, capsys):
    chapters, package = book
    run(chapters, package)
    capsys.readouterr()
    assert run(chapters, package) == 0
    assert capsys.readouterr().out == ""  # nothing rewritten
    assert run(chapters, package, "--check") == 0


def test_check_catches_an_edited_exported_cell_and_names_the_notebook(book, capsys):
    chapters, package = book
    run(chapters, package)
    nb_path = chapters / "01_first.ipynb"
    nb = nbformat.read(nb_path, as_version=4)
    nb.cells[2].source = nb.cells[2].source.replace("SCALE = 2", "SCALE = 3")
    nbformat.write(nb, nb_path)
    assert run(chapters, package, "--check") == 1
    err = capsys.readouterr().err
    assert "01_first.ipynb" in err and "make export" in err
    assert "-SCALE = 2" in err and "+SCALE = 3" in err  # the diff shows what changed


def test_check_catches_a_hand_edit_to_the_package(book, capsys):
    chapters, package = book
    run(chapters, package)
    module = package / "second.py"
    module.write_text(module.read_text().replace("double(double(x))", "x * 4"))
    assert run(chapters, package, "--check") == 1
    assert "02_second.ipynb" in capsys.readouterr().err


def test_check_catches_a_deliberate_edit_in_the_real_chapter_01(tmp_path, capsys):
    chapters, package = tmp_path / "chapters", tmp_path / "transformer"
    shutil.copytree(ROOT / "chapters", chapters)
    shutil.copytree(ROOT / "transformer", package, ignore=shutil.ignore_patterns("__pycache__"))
    path = chapters / "01_embedding.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.source.startswith("#| export"))
    cell.source += "\n# a deliberate edit"
    nbformat.write(nb, path)
    assert run(chapters, package, "--check") == 1
    assert "01_embedding.ipynb" in capsys.readouterr().err


def test_stale_generated_module_is_reported_and_removed(book, capsys):
    chapters, package = book
    run(chapters, package)
    (package / "gone.py").write_text(export.HEADER.format(source="chapters/99_gone.ipynb") + "\n")
    assert run(chapters, package, "--check") == 1
    assert "no longer exported" in capsys.readouterr().err
    assert run(chapters, package) == 0
    assert not (package / "gone.py").exists()


def test_hand_written_module_in_the_package_is_refused(book, capsys):
    chapters, package = book
    run(chapters, package)
    (package / "extra.py").write_text("x = 1\n")
    assert run(chapters, package, "--check") == 2
    assert "extra.py was not generated" in capsys.readouterr().err


def test_a_symbol_exported_from_two_chapters_is_refused(book):
    chapters, package = book
    make_chapter(chapters, "03_third", "#| default_exp third",
                 '#| export\ndef double(x):\n    """Again."""\n    return x + x')
    with pytest.raises(BookError, match="`double` is already exported by .*01_first"):
        export.build(read_book(chapters), package)


def test_importing_from_a_later_chapter_is_refused(book):
    chapters, package = book
    make_chapter(chapters, "00_zero", "#| default_exp zero",
                 "from transformer.second import Quad")
    with pytest.raises(BookError, match="imports `transformer.second`.*later"):
        export.build(read_book(chapters), package)
    # the same through the package's top level
    make_chapter(chapters, "00_zero", "#| default_exp zero", "from transformer import Quad")
    with pytest.raises(BookError, match="later"):
        export.build(read_book(chapters), package)
    # ... and in a class body, which runs when the cell does
    make_chapter(chapters, "00_zero", "#| default_exp zero",
                 "class Early:\n    from transformer.second import Quad")
    with pytest.raises(BookError, match="later"):
        export.build(read_book(chapters), package)


def test_a_later_chapter_may_be_imported_inside_a_function(book):
    """An import in a function body runs when the function is called, not when the chapter
    runs (chapter 08's PretrainedModel.generate imports chapter 10's generate so)."""
    chapters, package = book
    make_chapter(chapters, "00_zero", "#| default_exp zero",
                 '#| export\ndef quad(x):\n    """Quad of x."""\n    from transformer.second import Quad\n'
                 "    return Quad(x)")
    modules, _ = export.build(read_book(chapters), package)
    assert "zero" in modules


def test_exported_function_without_docstring_is_refused(book):
    chapters, package = book
    make_chapter(chapters, "03_third", "#| default_exp third", "#| export\ndef bare(x):\n    return x")
    with pytest.raises(BookError, match="`bare` needs a docstring"):
        export.build(read_book(chapters), package)


def test_a_docstring_that_already_says_where_it_is_defined_is_refused(book):
    chapters, package = book
    make_chapter(chapters, "03_third", "#| default_exp third",
                 '#| export\ndef twice(x):\n    """Twice.\n\n    Defined in chapter 03, Third.\n    """\n    return x')
    with pytest.raises(BookError, match="`twice` says where it is defined"):
        export.build(read_book(chapters), package)


def test_a_module_has_one_home_chapter(book):
    chapters, package = book
    make_chapter(chapters, "03_third", "#| default_exp third",
                 '#| export first\ndef more(x):\n    """More."""\n    return x')
    with pytest.raises(BookError, match="module `first` belongs to"):
        export.build(read_book(chapters), package)


FRONT = "#| export __init__\n# Maths\nfrom transformer.{module} import {names}\n\n__all__ = [{listed}]"


@pytest.mark.parametrize("module, names, listed, error", [
    ("second", "Quad", '"Quad"', None),
    ("second", "double", '"double"', "`double` is not exported by transformer.second but by transformer.first"),
    ("second", "Quad", '"Quad", "double"', "listed but not imported: ['double']"),
    ("second", "Quad", "", "not listed: ['Quad']"),
])
def test_a_chapter_writes_the_top_level_and_the_exporter_checks_it(book, capsys, module, names, listed, error):
    chapters, package = book
    make_chapter(chapters, "03_front", "# md # 03 · Front door",
                 FRONT.format(module=module, names=names, listed=listed))
    assert run(chapters, package) == (0 if error is None else 2)
    if error is None:
        init = (package / "__init__.py").read_text()
        assert "03_front.ipynb" in init.splitlines()[0]  # names the notebook to edit
        assert "# Maths\nfrom transformer.second import Quad\n" in init and '__all__ = ["Quad"]' in init
    else:
        assert error in capsys.readouterr().err


def test_the_api_reference_groups_the_top_level_as_appendix_15_writes_it():
    from tools.chapter_exports import package_groups, package_names

    groups = package_groups()
    assert list(groups)[:2] == ["Models and their configurations", "Layers"]
    assert sorted(name for names in groups.values() for name in names) == sorted(package_names())
