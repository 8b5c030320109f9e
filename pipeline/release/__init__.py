"""The released split: its one schema (`schema`), the manifest (`manifest`), the dataset card
(`card`) and checking, comparing and publishing release folders (`publish`). The release
stage itself is pipeline/stages/release.py."""
