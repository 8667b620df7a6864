"""The built-in workloads, found by name by ``load_workload`` (``gpt-mini`` is the default).

Modules:
    _batches      deterministic, re-iterable batch sources shared by the built-ins
    cnn_mini      cnn-mini: a small ResNet on procedural JPEG photos, data-bound as written
    cnn_pipeline  cnn-mini's input pipeline, written as users write one: JPEG decoded per sample
    data          the packaged text corpus of gpt-mini (a folder)
    gpt_mini      gpt-mini: a character GPT on KJV Genesis + Exodus, the default workload
    gpt_model     the nanoGPT-style decoder-only transformer gpt-mini trains
    hf            hf-gpt2, hf-llama, hf-vit, hf-resnet from small transformers configs
    mlp           mlp: a tabular MLP on a teacher-network regression task
"""
