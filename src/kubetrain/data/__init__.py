"""Data sets: fetched (`download`), checked, and written in kubetrain's on-disk format (`dataset_format`).

A source is `builtin:NAME` (shipped inside kubetrain), the URL or path of an .npz or archive (http,
https, file, or an object store such as s3:// and gs:// through fsspec), a base URL holding the
MNIST idx files, or a list of such files; `sources` checks one before anything is fetched.
Downloads resume, retry and verify checksums, archives unpack safely, and the result is a
directory of shards with a `dataset.json` that every training program reads.
"""
