"""The kit every lab uses: its command line (:mod:`~gpolab.kit.command`), running a lab into its
output folder (:mod:`~gpolab.kit.running`), resumable cells (:mod:`~gpolab.kit.store`), output
folders (:mod:`~gpolab.kit.output`), printed tables and JSON rows (:mod:`~gpolab.kit.tables`), the
one matplotlib setup (:mod:`~gpolab.kit.plots`), declarative experiments
(:mod:`~gpolab.kit.experiments`) and phase timings (:mod:`~gpolab.kit.timings`).  The library
never imports it; the kit imports no lab (it finds them by listing ``gpolab/labs``)."""
