"""The course text's one setting: `LABCTL_COURSE_DIR` (or a folder a command is given)."""

from __future__ import annotations

import pytest

from labctl.course import CH8, CHAPTERS, COURSE_DIR_ENV, HANDS_ON, PARTS, chapter_files, course_dir
from labctl.errors import CourseTextError, UsageError


def _course(folder, titles=(PARTS, CH8, HANDS_ON)):
    folder.mkdir()
    for n, chapter in enumerate(titles):
        # the chapters' file names say nothing; the first line holds the title
        (folder / f"{n:03d}_x.txt").write_text(f"6. {chapter.title}\n\n正文\n", "utf-8")
    (folder / "notes.txt").write_text("something else\n", "utf-8")
    return folder


def test_the_chapters_are_found_by_their_titles_in_the_folder_the_setting_names(
    tmp_path, monkeypatch
):
    folder = _course(tmp_path / "course")
    monkeypatch.setenv(COURSE_DIR_ENV, str(folder))
    found = chapter_files()
    assert set(found) == {c.key for c in CHAPTERS}
    assert found[CH8.key].read_text("utf-8").startswith(f"6. {CH8.title}")
    # a folder a command is given wins over the variable
    monkeypatch.setenv(COURSE_DIR_ENV, str(tmp_path / "elsewhere"))
    assert chapter_files(folder) == found


def test_without_the_setting_the_error_names_it(monkeypatch):
    monkeypatch.delenv(COURSE_DIR_ENV, raising=False)
    with pytest.raises(CourseTextError) as raised:
        course_dir()
    assert COURSE_DIR_ENV in str(raised.value)
    assert isinstance(raised.value, UsageError)


def test_a_setting_that_is_no_folder_is_named_with_its_value(tmp_path, monkeypatch):
    monkeypatch.setenv(COURSE_DIR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(CourseTextError, match=rf"{COURSE_DIR_ENV}=.*nowhere is not a folder"):
        course_dir()


def test_a_folder_missing_a_chapter_names_the_chapter(tmp_path, monkeypatch):
    folder = _course(tmp_path / "course", titles=(PARTS, HANDS_ON))
    monkeypatch.setenv(COURSE_DIR_ENV, str(folder))
    with pytest.raises(CourseTextError) as raised:
        chapter_files()
    assert CH8.title in str(raised.value) and PARTS.title not in str(raised.value)
