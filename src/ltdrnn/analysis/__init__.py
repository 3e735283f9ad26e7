"""Analyses of trained models and their plots (matplotlib, Agg backend, imported only when plotting).

``gradients``: gradient norm versus lag (MIST Fig. 2) and ||dh_T/dh_1|| (iRNN Fig. 3).
``plots``: learning curves, those two, SA-RNN update patterns, TARNN's beta over time, SRNN's
un-shifted hidden state; each writes one PNG and returns its path.
"""
