"""The search's work directory: MetaSchedule's log files go with it, and so do the handlers that wrote them."""

from __future__ import annotations

import logging
import os

from workers.tuning.search import work_dir


def test_the_work_dir_takes_the_log_handlers_into_it_along() -> None:
    logger = logging.getLogger("tvm.s_tir.meta_schedule.test_work_dir")
    elsewhere = logging.NullHandler()
    logger.addHandler(elsewhere)
    try:
        with work_dir() as folder:
            inside = logging.FileHandler(os.path.join(folder, "task.log"))
            logger.addHandler(inside)
            logger.warning("written while the folder exists")
        assert not os.path.exists(folder)
        assert inside not in logger.handlers and inside.stream is None, "a handler into a removed folder was kept"
        assert elsewhere in logger.handlers, "handlers writing elsewhere stay"
        logger.warning("logging goes on after the folder is gone")
    finally:
        logger.removeHandler(elsewhere)
