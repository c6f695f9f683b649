"""The parts of ``scripts/check_gpu.py``, one module each, and the files that carry it to a GPU machine.

* ``table``: the rows every part adds, the table and the JSON result;
* ``resume``: the digits recipe whole, stopped mid-epoch and resumed (plain and FSDP2);
* ``cost``: what SamplerSync and SampleLedger add to a step of a busy model;
* ``spin``: a resume at batch 1,000 of an epoch against Composer's spin;
* ``lightning``: a Lightning fit whole, stopped after a mid-epoch checkpoint and resumed (no Composer);
* ``wheels.txt``, ``image.txt``, ``fetch_wheels.sh``, ``run_on_device.sh``, ``rehearse.sh``: the
  wheels a machine without network needs, and the commands that install them and run the check.
"""
