"""The actor: an instance (Actor) and its parts, the process's ctx.

One running instance: `Actor` (`_instance`), made of its parts (`_writes`,
`_arrivals`, `_ends`), stepped by its task or by `_runner`; `_context` is the
`ctx` a process is given.
"""
