# An insurer's and a hospital's app/tools.py in the SDK's own style: claims, policies, wards and
# vital signs. With tests/support/bank_tools.py it is the corpus of the import's differential test
# (tests/engine/test_tools_import.py): every translated function and its rules make the same calls
# on random requests. Written the way such teams write them: loops over DataParts that return the
# matching part's values, the last part holding a key, values chosen in if/elif/else, small
# module-level helpers. Functions marked UNTRANSLATABLE must be reported with their reason.
# ruff: noqa: SIM102, SIM110
from llamon_agent.tools import DeterministicContext, deterministic_tool

URGENT_WARDS = ["ICU", "ER"]

# What the random requests put in DataParts (merged with the bank's keys).
DATA_KEYS = {
    "kind": ["claim", "policy", "vitals", "lab"],
    "claimId": ["CL-1", "CL-2", "CL-3"],
    "policyNo": ["P-100", "P-200"],
    "patientId": ["PT-7", "PT-8", "PT-9"],
    "spo2": [85, 88, 97, 99],
    "pulse": [45, 80, 130],
    "ward": ["ICU", "ER", "7B", "3A"],
    "status": ["open", "closed", "pending"],
    "premium": [10_000, 250_000, 1_200_000],
}


def _clean(text):
    return text.replace(" ", "").lower()


def _has_any(text, words):
    return any(w in text for w in words)


def _is_urgent_ward(ward):
    return ward in URGENT_WARDS


# --- insurer ---------------------------------------------------------------------------------------


@deterministic_tool(mcp_id="claims-service")
def claim_status_first(ctx: DeterministicContext) -> dict | None:
    """청구 상태: 첫 번째 claim DataPart의 claimId로 조회."""
    for part in ctx.a2a_data or []:
        if part.get("kind") == "claim":
            return {"tool_name": "get_claim", "params": {"claim_id": part.get("claimId")}}
    return None


@deterministic_tool(mcp_id="claims-service")
def claim_last_open(ctx: DeterministicContext) -> dict | None:
    """가장 마지막 open 청구."""
    last = None
    for part in ctx.a2a_data or []:
        if part.get("status") == "open":
            last = part
    if last is not None and "청구" in ctx.query:
        return {"tool_name": "get_claim", "params": {"claim_id": last.get("claimId"), "open": True}}
    return None


@deterministic_tool(mcp_id="claims-service")
def claim_first_pending(ctx: DeterministicContext) -> dict | None:
    found = None
    for part in ctx.a2a_data or []:
        if part.get("status") == "pending" and "claimId" in part:
            found = part.get("claimId")
            break
    if found:
        return {"tool_name": "get_claim", "params": {"claim_id": found, "pending": True}}
    return None


@deterministic_tool(mcp_id="policy-service")
def policy_lookup(ctx: DeterministicContext) -> dict | None:
    """보험증권 조회: 마지막 policyNo, 없으면 context의 값."""
    policy = ctx.context.get("policyNo")
    for part in ctx.a2a_data or []:
        if "policyNo" in part:
            policy = part.get("policyNo")
    if "증권" in ctx.query and policy:
        return {"tool_name": "get_policy", "params": {"policy_no": policy}}
    return None


@deterministic_tool(mcp_id="policy-service")
def premium_band(ctx: DeterministicContext) -> dict | None:
    """보험료 구간 안내: if/elif/else로 구간 결정."""
    if "보험료" not in ctx.query:
        return None
    premium = ctx.context.get("premium", 0)
    if premium >= 1_000_000:
        band = "high"
    elif premium >= 100_000:
        band = "mid"
    else:
        band = "low"
    return {"tool_name": "premium_guide", "params": {"band": band}}


@deterministic_tool(mcp_id="policy-service")
def renewal_by_channel(ctx: DeterministicContext) -> dict | None:
    channel = ctx.context.get("channel")
    if channel == "mobile":
        template = "app"
    elif channel == "web":
        template = "web"
    elif channel == "branch":
        template = "counter"
    else:
        return None
    if "갱신" in _clean(ctx.query):
        return {"tool_name": "renewal_notice", "params": {"template": template}}
    return None


@deterministic_tool(mcp_id="claims-service")
def claim_documents(ctx: DeterministicContext) -> dict | None:
    """UNTRANSLATABLE: the helper put in place loops over a word list, which a rule writes with contains_any."""
    names = [f.get("name") for f in ctx.a2a_files or [] if f.get("mimeType") == "application/pdf"]
    if names and _has_any(ctx.query, ["서류", "document"]):
        return {"tool_name": "attach_documents", "params": {"files": names}}
    return None


@deterministic_tool(mcp_id="claims-service")
def claim_ids_all(ctx: DeterministicContext) -> dict | None:
    ids = [p.get("claimId") for p in ctx.a2a_data or [] if p.get("kind") == "claim" and "claimId" in p]
    if ids and ("일괄" in ctx.query or "bulk" in ctx.query.lower()):
        return {"tool_name": "bulk_claims", "params": {"claim_ids": ids, "count": len(ids)}}
    return None


@deterministic_tool(mcp_id="policy-service")
def policy_by_clean_query(ctx: DeterministicContext) -> dict | None:
    if "해지환급금" in _clean(ctx.query):
        return {"tool_name": "surrender_value", "params": {"q": _clean(ctx.query)}}
    return None


@deterministic_tool(mcp_id="claims-service")
def claim_fraud_check(ctx: DeterministicContext) -> dict | None:
    """고액 청구(보험료 100만 이상)는 심사."""
    if any(p.get("premium", 0) >= 1_000_000 for p in ctx.a2a_data or []):
        if "청구" in ctx.query or "claim" in ctx.query.lower():
            return {"tool_name": "fraud_review", "params": {"user": ctx.context.get("userId")}}
    return None


# --- hospital --------------------------------------------------------------------------------------


@deterministic_tool(mcp_id="ward-pager")
def page_low_spo2(ctx: DeterministicContext) -> dict | None:
    """UNTRANSLATABLE: stops at the first low value; a later part's spo2 sent as text would fail the rule."""
    for part in ctx.a2a_data or []:
        if part.get("kind") == "vitals" and part.get("spo2", 100) < 90:
            return {
                "tool_name": "page_oncall",
                "params": {"patient": part.get("patientId"), "severity": "high", "spo2": part.get("spo2")},
            }
    return None


@deterministic_tool(mcp_id="ward-pager")
def page_by_pulse(ctx: DeterministicContext) -> dict | None:
    pulse = ctx.context.get("pulse", 80)
    if pulse > 120:
        severity = "high"
    elif pulse < 50:
        severity = "medium"
    else:
        return None
    return {"tool_name": "page_oncall", "params": {"severity": severity, "ward": ctx.context.get("ward", "")}}


@deterministic_tool(mcp_id="emr")
def latest_patient_chart(ctx: DeterministicContext) -> dict | None:
    """마지막으로 patientId를 가진 DataPart의 환자 차트."""
    patient = None
    for part in ctx.a2a_data or []:
        if "patientId" in part:
            patient = part.get("patientId")
    if patient is not None and ("차트" in ctx.query or "chart" in ctx.query.lower()):
        return {"tool_name": "get_chart", "params": {"patient_id": patient}}
    return None


@deterministic_tool(mcp_id="emr")
def first_lab_result(ctx: DeterministicContext) -> dict | None:
    for part in ctx.a2a_data or []:
        if part.get("kind") == "lab" and "patientId" in part:
            return {"tool_name": "get_labs", "params": {"patient_id": part.get("patientId"), "latest": True}}
    return None


@deterministic_tool(mcp_id="ward-pager", stop=True)
def urgent_ward(ctx: DeterministicContext) -> dict | None:
    """응급 병동(ICU, ER) 요청."""
    ward = ctx.context.get("ward")
    if ward in ["ICU", "ER"] and "호출" in ctx.query:
        return {"tool_name": "page_ward", "params": {"ward": ward}}
    return None


@deterministic_tool(mcp_id="emr")
def ward_census(ctx: DeterministicContext) -> dict | None:
    wards = sorted({p.get("ward") for p in ctx.a2a_data or [] if "ward" in p})
    if wards and "병상" in ctx.query:
        return {"tool_name": "ward_census", "params": {"wards": wards}}
    return None


@deterministic_tool(mcp_id="emr")
def appointment_kind(ctx: DeterministicContext) -> dict | None:
    q = ctx.query.lower()
    if "예약" not in q and "appointment" not in q:
        return None
    if "취소" in q or "cancel" in q:
        action = "cancel"
    elif "변경" in q or "change" in q:
        action = "change"
    else:
        action = "book"
    return {"tool_name": "appointment", "params": {"action": action, "user": ctx.context.get("userId")}}


@deterministic_tool(mcp_id="emr")
def discharge_summary(ctx: DeterministicContext) -> dict | None:
    """UNTRANSLATABLE: a helper called with another helper's result."""
    if _has_any(_clean(ctx.query), ["퇴원", "discharge"]):
        if ctx.context.get("authenticated") is True:
            return {"tool_name": "discharge_summary", "params": {"user": ctx.context.get("userId")}}
    return None


@deterministic_tool(mcp_id="emr")
def vitals_any_abnormal(ctx: DeterministicContext) -> dict | None:
    for part in ctx.a2a_data or []:
        if part.get("pulse", 80) > 120 or part.get("pulse", 80) < 50:
            return {"tool_name": "flag_vitals", "params": {"reason": "pulse"}}
    return None


@deterministic_tool(mcp_id="emr")
def scan_upload(ctx: DeterministicContext) -> dict | None:
    """영상 파일(png) 첨부 시 판독 요청: 마지막 png 파일."""
    image = None
    for f in ctx.a2a_files or []:
        if f.get("mimeType") == "image/png":
            image = f.get("name")
    if image and "판독" in ctx.query:
        return {"tool_name": "request_reading", "params": {"file": image}}
    return None


@deterministic_tool(mcp_id="emr")
def medication_refill(ctx: DeterministicContext) -> dict | None:
    if "처방" in ctx.query or "refill" in ctx.query.lower():
        channel = "app" if ctx.context.get("channel") == "mobile" else "desk"
        return {"tool_name": "refill", "params": {"channel": channel}}
    return None


@deterministic_tool(mcp_id="policy-service")
def travel_insurance(ctx: DeterministicContext) -> dict | None:
    """여행자 보험: 국가별 상품."""
    if "여행" not in ctx.query:
        return None
    country = ctx.context.get("country")
    if country == "KR":
        product = "domestic"
    elif country in ("US", "JP"):
        product = "overseas"
    else:
        product = "general"
    return {"tool_name": "travel_products", "params": {"product": product}}


@deterministic_tool(mcp_id="claims-service")
def first_pdf_claim_form(ctx: DeterministicContext) -> dict | None:
    """첫 번째 PDF 첨부를 청구서로."""
    for f in ctx.a2a_files or []:
        if f.get("mimeType") == "application/pdf":
            return {"tool_name": "read_claim_form", "params": {"file": f.get("name"), "uri": f.get("uri")}}
    return None


@deterministic_tool(mcp_id="emr")
def lab_count(ctx: DeterministicContext) -> dict | None:
    labs = [p for p in ctx.a2a_data or [] if p.get("kind") == "lab"]
    if len(labs) >= 1 and "검사" in ctx.query:
        return {"tool_name": "lab_summary", "params": {"count": len(labs)}}
    return None


# --- left out, each with its reason ----------------------------------------------------------------


@deterministic_tool(mcp_id="ward-pager")
def urgent_by_global(ctx: DeterministicContext) -> dict | None:
    """UNTRANSLATABLE: its helper reads a module-level list."""
    if _is_urgent_ward(ctx.context.get("ward")):
        return {"tool_name": "page_ward", "params": {"ward": "urgent"}}
    return None


@deterministic_tool(mcp_id="emr")
def first_spo2_unsafe(ctx: DeterministicContext) -> dict | None:
    """UNTRANSLATABLE: stops at the first part, whose test can fail on a later one."""
    value = None
    for part in ctx.a2a_data or []:
        if part["spo2"] < 90:
            value = part["spo2"]
            break
    if value is not None:
        return {"tool_name": "flag_vitals", "params": {"spo2": value}}
    return None


DETERMINISTIC_TOOLS = [
    page_low_spo2,
    claim_status_first,
    claim_last_open,
    claim_first_pending,
    policy_lookup,
    premium_band,
    renewal_by_channel,
    claim_documents,
    claim_ids_all,
    policy_by_clean_query,
    claim_fraud_check,
    page_by_pulse,
    latest_patient_chart,
    first_lab_result,
    urgent_ward,
    ward_census,
    appointment_kind,
    discharge_summary,
    vitals_any_abnormal,
    scan_upload,
    medication_refill,
    travel_insurance,
    first_pdf_claim_form,
    lab_count,
    urgent_by_global,
    first_spo2_unsafe,
]
