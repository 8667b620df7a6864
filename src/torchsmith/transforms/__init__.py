"""One file per optimisation: ``apply_x(target, cfg) -> Change``, plus the metadata ``tune`` searches.

Modules:
    activation_checkpoint  activation checkpointing of the repeated blocks: full, every k-th, selective
    base                   what every transform shares: Change, TransformError, DeviceInfo, TransformInfo
    bf16_params            bf16 Linear/Conv parameters with fp32 master weights
    compile                torch.compile of the whole model or of each block
    inference              inference(model): evaluation under inference_mode, modes restored
    inplace                in-place activations, only where provably safe
    loader                 the workload's DataLoader rebuilt with the plan's loader arguments
    loss_impl              the chunked LM-head loss in place of Linear + cross-entropy
    memory_format          channels_last for conv nets
    microbatching          split a batch, accumulate gradients, step once
    optimizer_impl         per-parameter loop, foreach or fused optimizer kernels
    parts                  StepParts: the pieces a training step is made of
    precision              autocast to bf16/fp16, GradScaler for fp16
    saved_tensors          activations saved for backward: as written, offloaded or compressed
    threads                intra-op and inter-op thread pools
"""
