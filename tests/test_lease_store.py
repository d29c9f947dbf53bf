"""ctl.resilience.lease_store: the lease record is written only on a
condition that one writer of two wins, in a file and on Cloud Storage."""

import pytest

from ctl.resilience import lease_store


def test_a_take_over_cannot_land_inside_a_renewal(tmp_path, monkeypatch):
  """A holder paused between its renewal's check and its write (SIGSTOP, a
  long GC pause) must not overwrite the record of a trainer that took over
  meanwhile, or both would go on as the holder. Here the second trainer's
  take-over runs from inside the first's check, the moment such a pause
  leaves open: exactly one of the two may hold the lease after it."""
  path = str(tmp_path / lease_store.LEASE_FILE)
  holder, taker = lease_store.FileStore(path), lease_store.FileStore(path)
  token = holder.create(b"A1")
  monkeypatch.setattr(lease_store, "_LOCK_WAIT_SECS", 0.2)
  outcome = {}
  check = holder.read

  def check_then_pause():
    found = check()
    try:
      outcome["taker"] = taker.take_over(b"B1", found[1])
    except FileExistsError:
      outcome["taker"] = None
    return found

  monkeypatch.setattr(holder, "read", check_then_pause)
  try:
    outcome["holder"] = holder.replace(b"A2", token)
  except FileExistsError:
    outcome["holder"] = None
  winners = [who for who, token in outcome.items() if token is not None]
  assert len(winners) == 1, outcome  # Both, before.
  with open(path, "rb") as f:
    assert f.read() == outcome[winners[0]]


@pytest.mark.processes
def test_the_emulator_honours_generation_preconditions(gcs_emulator):
  # The lease's GcsStore relies on it; gcp-storage-emulator alone ignores it.
  store = lease_store.GcsStore(
    gcs_emulator.filesystem(),
    f"{gcs_emulator.BUCKET}/x/{lease_store.LEASE_FILE}",
    url=f"gs://{gcs_emulator.BUCKET}/x",
  )
  generation = store.create(b"{}")
  with pytest.raises(FileExistsError):
    store.create(b"{}")
  with pytest.raises(FileExistsError):
    store.replace(b"{}", "1")
  newer = store.replace(b"{}", generation)
  store.delete(generation)  # Not the current generation: kept.
  assert store.read() is not None
  store.delete(newer)
  assert store.read() is None


@pytest.mark.parametrize(
  "recorded, expected",
  [(5.0, 5.0), (0.0, 30.0), (-1.0, 30.0)],
  ids=["recorded", "older", "negative"],
)
def test_a_holders_renewal_period_is_its_record_or_a_quarter_of_its_staleness(
  recorded, expected
):
  """A record written before the period was recorded (0), or one naming no
  period a holder could keep (below 0), renews every quarter of its
  staleness, as holders did then."""
  holder = lease_store.Holder(
    "h", 7, "j", 0.0, 0.0, 1, stale_secs=120.0, renew_secs=recorded
  )
  assert holder.renewal_period(3600.0) == expected
