"""All rendering: the terminal (rich), JSON-ready data and self-contained HTML reports. Nothing below prints.

Modules:
    console         the rich consoles every renderer writes to, logging set-up, formatting helpers
    data            ``data``: pack summary, verify report, loader tuning table
    debug           the debugging toolkit: gradient heatmap, NaN findings, gradcheck, graph, OOM
    dist            ``launch`` and ``debug desync``
    doctor          a DoctorReport: terminal, JSON-ready data, self-contained HTML
    html            self-contained HTML pages: inline CSS, charts as embedded PNGs, no network
    inspect         an InspectResult: the module table, the memory split against the measured peak
    progress        the progress bar of run: step, loss, throughput, ETA
    run             a RunResult: the summary table and JSON-ready data
    scale           the scale rows of tune --nproc-per-node: each strategy predicted, and measured here
    scale_html      the HTML report's strategies side by side and scaling curves, on several ranks
    step_time_plot  step-time distributions side by side (box plots) for the HTML reports
    tips            a TipsReport: terminal table, JSON, the markdown of docs/tips.md
    tune            a tuning run in the terminal: progress bar and summary
    tune_html       write_tune_report: the self-contained HTML report of a tuning run
    tune_json       ``tune --json``: a tuning result as one JSON object
    tune_script     what a script tuning run adds to the tune report
    verify          terminal rendering of ``verify``: the interval and what it means for the gate
    verify_script   terminal rendering of ``verify PLAN -- cmd``
"""
