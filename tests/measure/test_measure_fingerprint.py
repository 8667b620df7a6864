"""Machine fingerprint: consistent with what torch and the OS report."""

import os

import torch

from torchsmith.measure.fingerprint import machine_fingerprint


def test_fingerprint_matches_torch_and_os():
    fp = machine_fingerprint()
    assert fp.cpu_model and fp.cpu_model != ""
    assert fp.cpu_capability == torch.backends.cpu.get_cpu_capability()
    assert fp.torch_threads == torch.get_num_threads()
    assert fp.torch_version == torch.__version__
    assert 1 <= fp.available_cores <= fp.logical_cores == os.cpu_count()
    assert (fp.cuda_device is None) == (not torch.cuda.is_available())
    assert fp.native_bf16 in (True, False, None)


def test_bf16_flag_agrees_with_cpu_flags():
    fp = machine_fingerprint()
    if fp.cpu_flags:
        bf16 = {"avx512_bf16", "amx_bf16", "bf16"}
        assert fp.native_bf16 == bool(bf16 & set(fp.cpu_flags))
    if fp.native_bf16 is not None and hasattr(torch.cpu, "_is_avx512_bf16_supported"):
        # torch's own probe agrees whenever it says yes (it knows x86 only).
        if torch.cpu._is_avx512_bf16_supported():
            assert fp.native_bf16
