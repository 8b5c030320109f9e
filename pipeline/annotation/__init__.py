"""Human annotation: blinded batches out (`export`), labels in (`importer`, `formats`),
agreement and verdicts (`stats`), and what a build releases because of them (`verdicts`).
Where the files live: `layout`."""
