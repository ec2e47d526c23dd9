"""Harbor's formats: task directories, their content digest, registry datasets, and
`hangar task`."""
