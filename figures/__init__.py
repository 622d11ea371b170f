"""Figures, tables, checklist and REPRODUCTION.md of the ARMOR reproduction, from
runs/<preset>/results.parquet.

    python -m figures --results runs/<preset>/results.parquet --out DIR [--only fig4,table1] [--preset NAME]
                      [--report REPRODUCTION.md --command "..." --seeds 0,1 --wall-time-s S]
    python -m figures.report --results ... --out REPRODUCTION.md --preset NAME ...

Modules: data (loading, seed curves, checkpoint selection), plots (fig1..fig7), tables (table1..table3),
paper (+ paper_numbers.yaml: the paper's numbers, overlaid on the paper presets), claims (every entry of the
claims register decided: checklist.json/.md, the forest plot), checklist (the verdicts' record, file and
terminal lines), build (draw_all), report (write_report), synthetic (a fake runs folder for tests and
demos). Nothing here reads outside the repository or the given results/runs folders.
"""
