"""The repository's tests: they call the endpoint with runpod-python, as
they would call it on RunPod (only the base URL differs)."""

import os

import pytest
import runpod

runpod.api_key = os.environ["RUNPOD_API_KEY"]


@pytest.fixture(scope="module")
def endpoint():
    return runpod.Endpoint(os.environ["ENDPOINT_ID"])


def test_upper(endpoint):
    assert endpoint.run_sync({"text": "hello"}, timeout=300) == {"upper": "HELLO", "length": 5}


def test_async_job(endpoint):
    job = endpoint.run({"text": "berth"})
    assert job.output(timeout=120) == {"upper": "BERTH", "length": 5}
    assert job.status() == "COMPLETED"


def test_bad_input_fails_the_job(endpoint):
    job = endpoint.run({"text": 42})
    job.output(timeout=120)
    assert job.status() == "FAILED"
