"""A test double for a crash: under torchrun, `die_after_step.py RANK:STEP CONFIG --out OUT ...`
runs appendix 15's train command with a training step that kills process RANK (SIGKILL, no
clean-up) right after update STEP. Nothing in the package knows about crashes."""

import os
import signal
import sys

import transformer.trainer as trainer
from transformer.commands import train_command

RANK, STEP = map(int, sys.argv[1].split(":"))
real_step = trainer.accumulated_train_step


def step_then_die(state, *args, **kwargs):
    result = real_step(state, *args, **kwargs)
    if int(os.environ.get("RANK", "0")) == RANK and state.step == STEP:
        os.kill(os.getpid(), signal.SIGKILL)
    return result


trainer.accumulated_train_step = step_then_die
sys.exit(train_command(sys.argv[2:]))
