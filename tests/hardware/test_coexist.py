"""Generation beside training: allowed when both fit, refused with an actionable message otherwise."""

import pytest

from engine.errors import GenerationError
from engine.hardware.coexist import check_room_to_generate


def test_no_training_or_cpu_always_allowed():
    check_room_to_generate(100.0, training_run=None, free_gib=1.0)
    check_room_to_generate(100.0, training_run="lora-1", free_gib=None)  # CPU: RAM is shared, never refused


def test_fits_beside_training():
    check_room_to_generate(2.0, training_run="lora-1", free_gib=8.0)


def test_does_not_fit_gets_a_message():
    with pytest.raises(GenerationError, match="lora-1.*4-bit"):
        check_room_to_generate(6.0, training_run="lora-1", free_gib=4.0)
