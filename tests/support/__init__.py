"""What the tests share: real parts, the resume harness, the launcher, the S3 server and the scripts they run."""
