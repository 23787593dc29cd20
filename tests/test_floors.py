"""scripts/check_floors.py: each crate's modules stand on floors, with no
circle between sibling modules; the checker itself finds a circle made on
purpose, through every way of naming a module."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import check_floors  # noqa: E402


def crate(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        f = tmp_path / "src" / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return tmp_path


def test_the_workspace_has_no_circle():
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_floors.py")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("use_a", [
    "use crate::a::Thing;",
    "use crate::{a::Thing, c};",
    "use super::a::Thing;",
    "fn f() -> crate::a::Thing { todo!() }",
    "use crate::{\n    c::X,\n    a::{Thing, Other},\n};",
])
def test_a_circle_between_siblings_is_found(tmp_path, use_a):
    root = crate(tmp_path, {
        "lib.rs": "pub mod a;\npub mod b;\npub mod c;\n",
        "a.rs": "use crate::b::B;\npub struct Thing;\npub struct Other;\n",
        "b.rs": use_a + "\npub struct B;\n",
        "c.rs": "pub struct X;\n",
    })
    problems = check_floors.check([root])
    assert len(problems) == 1 and "a circle among a, b" in problems[0], problems


def test_a_circle_inside_a_folder_module_is_found(tmp_path):
    root = crate(tmp_path, {
        "lib.rs": "pub mod t;\n",
        "t/mod.rs": "pub mod x;\npub mod y;\npub fn shared() {}\n",
        "t/x.rs": "use super::y::Y;\nuse super::shared;\npub struct X;\n",
        "t/y.rs": "use crate::t::x::X;\npub struct Y;\n",
    })
    problems = check_floors.check([root])
    assert len(problems) == 1 and "crate::t: a circle among x, y" in problems[0], problems


def test_tests_comments_strings_and_the_parent_do_not_count(tmp_path):
    root = crate(tmp_path, {
        "lib.rs": "pub mod a;\npub mod b;\npub fn top() {}\n",
        "a.rs": "use crate::b::B;\nuse crate::top;\n",
        "b.rs": ("pub struct B;\n// use crate::a::A;\n"
                 "const S: &str = \"crate::a::A\";\n"
                 "#[cfg(test)]\nmod tests {\n    use crate::a::*;\n    fn f() { let _ = \"}\"; }\n}\n"),
    })
    assert check_floors.check([root]) == []


def test_literals_do_not_hide_code(tmp_path):
    # A `//` in a string, a quote in a char literal and a word ending in r
    # before a string must not swallow the import after them.
    root = crate(tmp_path, {
        "lib.rs": "pub mod a;\npub mod b;\n",
        "a.rs": "use crate::b::B;\npub struct A;\n",
        "b.rs": ('const U: &str = "http://x"; const Q: char = \'"\'; fn f(bearer: &str) {}\n'
                 'const R: &str = r#"a "quoted" word"#;\n'
                 "use crate::a::A;\npub struct B;\n"),
    })
    problems = check_floors.check([root])
    assert len(problems) == 1 and "a, b" in problems[0], problems
