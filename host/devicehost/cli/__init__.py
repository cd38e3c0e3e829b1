"""The command line (``main``), the narrated demo (``demo``), ``new-driver`` (``scaffold``)
and the view of a running daemon (``live``). Empty on purpose: ``devicehost run`` forks its
zygote before it imports anything else of the host."""
