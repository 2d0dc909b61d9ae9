"""Webhook fuzz at volume: 10,000 generated AdmissionReviews, 50 in flight at once, through the real HTTPS server.

The hypothesis fuzz in ``tests/webhook/test_fuzz.py`` explores shapes (2,000 examples, one connection); this one is
about volume and concurrency: no review may get an HTTP 5xx or a review answered with code 500 (a rule that
raised), none may fail at the transport, and the server must still answer ``/healthz`` afterwards. The reviews
come from the seeded mutator in :mod:`e2e.webhook_load`, so a failure is reproducible from the seed.
"""

from __future__ import annotations

import pytest

from e2e import webhook_load

pytestmark = pytest.mark.slow


async def test_ten_thousand_concurrent_admission_reviews_get_no_500() -> None:
    result = await webhook_load.fuzz(10_000, concurrency=50, seed=7)
    assert result.reviews == 10_000
    assert result.transport_errors == ()
    assert result.bad_answers == ()
    assert result.http_500 == 0, result.http_status
    assert result.body_500 == 0, result.denial_codes
    # the generator reached every kind of answer: allowed/denied reviews, malformed bodies, unknown paths
    assert set(result.http_status) == {200, 400, 404}, result.http_status
    assert result.http_status[200] > 2000 and result.denial_codes.get(422, 0) > 500, result
