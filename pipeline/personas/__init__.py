"""Personas: the library's files (`files`), sampling (`sampling`), where a build gets its
users (`sources`: the library, a local file, a hub dataset), checks (`checks`), library tools
(`library`, `expand`) and the `prb personas` commands (`cli`)."""
