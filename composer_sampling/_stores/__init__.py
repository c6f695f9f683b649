"""Object stores: reading a run's files from one, as Composer reads them, for any trainer (no Composer imported to
list or read an ``s3://`` folder).

What other folders may import, one module per line:

* ``remote``: a URI split into its store and path, its objects listed and downloaded through Composer's object
  stores (or ``s3_reader`` for ``s3://`` without Composer), its ``.symlink`` pointers followed a bounded number of
  times;
* ``pointers``: Composer's ``.symlink`` pointer objects, followed at most ``MAX_POINTERS`` times;
* ``s3_reader``: the read methods of Composer's ``S3ObjectStore`` with boto3 alone.
"""
