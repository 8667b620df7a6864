"""Multi-process training under torchrun: the DDP / ZeRO-1 / FSDP2 wraps, DCP checkpoints, launch, desync checks.

Modules:
    checkpoint    DistCheckpointer: torch.distributed.checkpoint (DCP) saves, one directory per step
    commcount     count_collectives: the collectives a training step issues, and their bytes
    ddp           DistributedDataParallel: a full replica per rank, gradients all-reduced in backward
    desync        check_desync: all-gather parameter checksums and name the replicas that drifted
    fsdp2         FSDP2: fully_shard each block, then the root
    launch        the torchrun command behind ``torchsmith launch``
    runtime       the process group under torchrun: init from the environment, batch sharding, agreed flags
    safe_metadata DCP's .metadata read without letting it run code
    strategy      the distributed wrap picked from Plan.parallel: Single, DDP, ZeRO-1 or FSDP2
    zero1         ZeRO-1: DDP for the gradients, ZeroRedundancyOptimizer for the optimizer state
"""
