# A bank's app/tools.py in the SDK's own style: the routing functions of a Korean retail bank's
# assistant. tests/engine/test_tools_import.py imports it as rules (tools_import) and checks that
# every translated function and its rules make the same calls on random requests; the functions
# marked UNTRANSLATABLE must be reported with their line. Nested ifs are written on purpose.
# ruff: noqa: SIM102
import json
import logging

from llamon_agent.tools import DeterministicContext, deterministic_tool

logger = logging.getLogger(__name__)

VIP_CHATBOTS = ["private-banking", "vip-desk"]
LARGE_TRANSFER = 10_000_000


def _normalise(text):
    return text.replace(" ", "")


@deterministic_tool(mcp_id="account-service")
def balance_lookup(ctx: DeterministicContext) -> dict | None:
    """잔액 조회: '잔액' 또는 '잔고'가 있으면 계좌 잔액을 확정 조회."""
    if "잔액" in ctx.query or "잔고" in ctx.query:
        return {"tool_name": "get_balance", "params": {"user_id": ctx.context.get("userId")}}
    return None


@deterministic_tool(mcp_id="account-service")
def recent_transactions(ctx: DeterministicContext) -> dict | None:
    """거래내역 조회 (최근 N건)."""
    if "거래내역" not in ctx.query:
        return None
    limit = 20 if "전체" in ctx.query else 5
    return {
        "tool_name": "get_transactions",
        "params": {"user_id": ctx.context.get("userId"), "limit": limit},
    }


@deterministic_tool(mcp_id="account-service")
def transfer_limit_by_chatbot(ctx: DeterministicContext) -> dict | None:
    """이체 한도: private-banking 챗봇은 확정 조회."""
    chatbot = ctx.context.get("chatbotId")
    if chatbot == "private-banking" and "이체" in ctx.query and "한도" in ctx.query:
        return {"tool_name": "get_transfer_limit", "params": {"tier": "private"}}
    return None


@deterministic_tool(mcp_id="account-service")
def transfer_limit_default(ctx: DeterministicContext) -> dict | None:
    if ctx.context.get("chatbotId") != "private-banking":
        if "이체한도" in ctx.query:
            return {"tool_name": "get_transfer_limit", "params": {"tier": "standard"}}
    return None


@deterministic_tool(mcp_id="loan-service")
def loan_rates(ctx: DeterministicContext) -> dict | None:
    """대출 금리 안내."""
    q = ctx.query.lower()
    if "대출" in q and ("금리" in q or "이자" in q or "rate" in q):
        return {"tool_name": "get_loan_rates", "params": {"product": "credit" if "신용" in q else "mortgage"}}
    return None


@deterministic_tool(mcp_id="loan-service")
def loan_eligibility_by_amount(ctx: DeterministicContext) -> dict | None:
    """DataPart의 신청 금액(amount)이 1억 이상이면 심사 조회."""
    if not ctx.a2a_data:
        return None
    if any(d.get("amount", 0) >= 100_000_000 for d in ctx.a2a_data):
        return {
            "tool_name": "check_loan_eligibility",
            "params": {"amounts": [d.get("amount") for d in ctx.a2a_data], "user": ctx.context.get("userId")},
        }
    return None


@deterministic_tool(mcp_id="loan-service")
def loan_small_amount(ctx: DeterministicContext) -> dict | None:
    for part in ctx.a2a_data or []:
        if part.get("type") == "loan" and part.get("amount", 0) < 5_000_000:
            return {"tool_name": "check_loan_eligibility", "params": {"fast_track": True}}
    return None


@deterministic_tool(mcp_id="card-service", stop=True)
def card_lost(ctx: DeterministicContext) -> dict | None:
    """카드 분실 신고: 확정 호출 후 다른 규칙은 보지 않음 (stop)."""
    if any(word in ctx.query for word in ("분실", "도난", "잃어버")):
        if "카드" in ctx.query:
            return {
                "tool_name": "block_card",
                "params": {"user_id": ctx.context.get("userId"), "reason": "lost"},
            }
    return None


@deterministic_tool(mcp_id="card-service")
def card_status(ctx: DeterministicContext) -> dict | None:
    if "카드" in ctx.query and "발급" in ctx.query:
        return {"tool_name": "get_card_status", "params": {"user_id": ctx.context.get("userId")}}
    elif "카드" in ctx.query and "배송" in ctx.query:
        return {
            "tool_name": "get_card_status",
            "params": {"user_id": ctx.context.get("userId"), "delivery": True},
        }
    return None


@deterministic_tool(mcp_id="card-service")
def card_by_tool_list(ctx: DeterministicContext) -> dict | None:
    """카드 혜택: 서버에 get_card_benefits가 있을 때만."""
    tool_names = {t.name for t in ctx.mcp_tools}
    if "get_card_benefits" in tool_names and ("혜택" in ctx.query or "benefit" in ctx.query.lower()):
        return {"tool_name": "get_card_benefits", "params": {"q": ctx.query}}
    return None


@deterministic_tool(mcp_id="fx-service")
def fx_rate(ctx: DeterministicContext) -> dict | None:
    """환율 조회: 통화 코드를 query에서 찾음."""
    if "환율" not in ctx.query and "exchange" not in ctx.query.lower():
        return None
    upper = ctx.query.upper()
    currency = "USD"
    if "JPY" in upper or "엔화" in ctx.query:
        return {"tool_name": "get_exchange_rate", "params": {"currency": "JPY"}}
    if "EUR" in upper or "유로" in ctx.query:
        return {"tool_name": "get_exchange_rate", "params": {"currency": "EUR"}}
    return {"tool_name": "get_exchange_rate", "params": {"currency": currency}}


@deterministic_tool(mcp_id="fx-service")
def fx_remittance(ctx: DeterministicContext) -> dict | None:
    if "해외송금" in ctx.query:
        if ctx.context.get("channel") == "mobile":
            return {"tool_name": "get_remittance_fee", "params": {"channel": "mobile"}}
        return {
            "tool_name": "get_remittance_fee",
            "params": {"channel": ctx.context.get("channel", "branch")},
        }
    return None


@deterministic_tool(mcp_id="doc-service")
def parse_pdf(ctx: DeterministicContext) -> dict | None:
    """PDF 첨부(FilePart)가 있으면 문서 분석."""
    pdfs = [f for f in ctx.a2a_files or [] if f.get("mimeType") == "application/pdf"]
    if pdfs:
        return {"tool_name": "parse_document", "params": {"uris": [f.get("uri") for f in pdfs]}}
    return None


@deterministic_tool(mcp_id="doc-service")
def large_attachment(ctx: DeterministicContext) -> dict | None:
    if ctx.a2a_files and any((f.get("size") or 0) > 5_000_000 for f in ctx.a2a_files):
        return {"tool_name": "scan_document", "params": {"count": len(ctx.a2a_files)}}
    return None


@deterministic_tool(mcp_id="doc-service")
def id_card_image(ctx: DeterministicContext) -> dict | None:
    """신분증 사진 (image/*) + '신분증' 키워드."""
    if "신분증" in ctx.query:
        images = [
            f.get("name") for f in ctx.a2a_files or [] if str(f.get("mimeType", "")).startswith("image/")
        ]
        if len(images) > 0:
            return {"tool_name": "verify_id", "params": {"files": images}}
    return None


@deterministic_tool(mcp_id="kb")
def faq_search(ctx: DeterministicContext) -> dict | None:
    """'검색' 또는 '알려줘' → FAQ 검색 (search_faq 도구가 있을 때)."""
    if not any(t.name == "search_faq" for t in ctx.mcp_tools):
        return None
    if "검색" in ctx.query or "알려줘" in ctx.query:
        return {"tool_name": "search_faq", "params": {"q": ctx.query[:200]}}
    return None


@deterministic_tool(mcp_id="kb")
def faq_english(ctx: DeterministicContext) -> dict | None:
    text = ctx.query.strip().lower()
    if text.startswith("how do i") or text.startswith("how to"):
        return {"tool_name": "search_faq", "params": {"q": text, "lang": "en"}}
    return None


@deterministic_tool(mcp_id="kb")
def branch_hours(ctx: DeterministicContext) -> dict | None:
    """영업시간/지점 안내."""
    if all(w in ctx.query for w in ["지점", "시간"]):
        return {"tool_name": "search_faq", "params": {"q": "영업시간", "branch": True}}
    return None


@deterministic_tool(mcp_id="fraud-service")
def large_transfer_review(ctx: DeterministicContext) -> dict | None:
    """DataPart 이체 금액 임계값: 1천만원 초과 → 이상거래 점검."""
    amounts = [d.get("transfer_amount", 0) for d in ctx.a2a_data or []]
    if amounts and max(amounts) > 10_000_000:
        return {"tool_name": "flag_transaction", "params": {"max_amount": max(amounts), "level": "high"}}
    return None


@deterministic_tool(mcp_id="fraud-service")
def foreign_login(ctx: DeterministicContext) -> dict | None:
    if ctx.context.get("country") not in (None, "KR") and "로그인" in ctx.query:
        return {"tool_name": "flag_login", "params": {"country": ctx.context.get("country")}}
    return None


@deterministic_tool(mcp_id="fraud-service")
def velocity_check(ctx: DeterministicContext) -> dict | None:
    """DataPart의 count 합계가 5 이상."""
    total = sum(d.get("count", 0) for d in ctx.a2a_data or [])
    if total >= 5:
        return {"tool_name": "flag_transaction", "params": {"count": total, "level": "medium"}}
    return None


@deterministic_tool(mcp_id="crm")
def vip_profile(ctx: DeterministicContext) -> dict | None:
    """VIP 챗봇은 고객 프로필을 먼저 조회."""
    if ctx.context.get("chatbotId") in ("private-banking", "vip-desk"):
        return {"tool_name": "get_customer_profile", "params": {"customer_id": ctx.context.get("userId")}}
    return None


@deterministic_tool(mcp_id="crm")
def complaint(ctx: DeterministicContext) -> dict | None:
    """민원 접수."""
    if "민원" in ctx.query or "불만" in ctx.query:
        severity = "high" if "금감원" in ctx.query else "normal"
        return {
            "tool_name": "open_ticket",
            "params": {
                "category": "complaint",
                "severity": severity,
                "session": ctx.context.get("sessionId"),
            },
        }
    return None


@deterministic_tool(mcp_id="crm")
def address_change(ctx: DeterministicContext) -> dict | None:
    if "주소" in ctx.query and "변경" in ctx.query:
        if ctx.context.get("authenticated") is True:
            return {"tool_name": "update_address", "params": {"user_id": ctx.context.get("userId")}}
        return {"tool_name": "open_ticket", "params": {"category": "auth_required"}}
    return None


@deterministic_tool(mcp_id="crm")
def tier_by_datapart(ctx: DeterministicContext) -> dict | None:
    """DataPart의 tier == 'gold' 인 고객의 혜택 조회."""
    tiers = [d.get("tier") for d in ctx.a2a_data or [] if "tier" in d]
    if "gold" in tiers or "platinum" in tiers:
        return {"tool_name": "get_customer_profile", "params": {"tiers": tiers}}
    return None


@deterministic_tool(mcp_id="account-service")
def dormant_account(ctx: DeterministicContext) -> dict | None:
    if "휴면" in ctx.query:
        return {"tool_name": "get_balance", "params": {"user_id": ctx.context.get("userId"), "dormant": True}}
    return None


@deterministic_tool(mcp_id="account-service")
def account_opening(ctx: DeterministicContext) -> dict | None:
    """계좌 개설: 미성년자(age < 19)는 다른 절차."""
    if not ("계좌" in ctx.query and "개설" in ctx.query):
        return None
    age = ctx.context.get("age")
    if age is not None and age < 19:
        return {"tool_name": "open_account", "params": {"minor": True}}
    return {"tool_name": "open_account", "params": {"minor": False}}


@deterministic_tool(mcp_id="loan-service")
def mortgage_ltv(ctx: DeterministicContext) -> dict | None:
    """주택담보대출: DataPart의 집값과 대출액으로 LTV 계산."""
    if "주담대" not in ctx.query and "주택담보" not in ctx.query:
        return None
    price = ctx.context.get("house_price", 0)
    loan = ctx.context.get("loan_amount", 0)
    if price and loan / price > 0.7:
        return {"tool_name": "get_loan_rates", "params": {"product": "mortgage", "ltv_high": True}}
    return {"tool_name": "get_loan_rates", "params": {"product": "mortgage", "ltv_high": False}}


@deterministic_tool(mcp_id="loan-service")
def repayment_schedule(ctx: DeterministicContext) -> dict | None:
    if "상환" in ctx.query:
        months = ctx.context.get("months", 12)
        return {"tool_name": "get_repayment_schedule", "params": {"months": months, "query": ctx.query}}
    return None


@deterministic_tool(mcp_id="card-service")
def card_limit_increase(ctx: DeterministicContext) -> dict | None:
    """한도 상향: DataPart requested_limit가 현재 한도의 2배 이하."""
    if "한도" in ctx.query and "상향" in ctx.query:
        for d in ctx.a2a_data or []:
            if d.get("requested_limit", 0) > 0:
                return {
                    "tool_name": "request_limit_increase",
                    "params": {"user_id": ctx.context.get("userId")},
                }
    return None


@deterministic_tool(mcp_id="kb")
def english_help(ctx: DeterministicContext) -> dict | None:
    words = ctx.query.lower().split()
    if "help" in words or "support" in words:
        return {"tool_name": "search_faq", "params": {"q": " ".join(words[:10]), "lang": "en"}}
    return None


@deterministic_tool(mcp_id="kb")
def tool_prefix(ctx: DeterministicContext) -> dict | None:
    """서버 도구 중 'search_'로 시작하는 것이 2개 이상이면 안내 검색."""
    search_tools = [t.name for t in ctx.mcp_tools if t.name.startswith("search_")]
    if len(search_tools) >= 2 and "안내" in ctx.query:
        return {"tool_name": "search_faq", "params": {"q": ctx.query, "tools": sorted(search_tools)}}
    return None


@deterministic_tool(mcp_id="crm")
def session_resume(ctx: DeterministicContext) -> dict | None:
    session = ctx.context.get("sessionId")
    if session and str(session).startswith("resume-"):
        return {"tool_name": "get_customer_profile", "params": {"session": session}}
    return None


@deterministic_tool(mcp_id="account-service")
def salary_account(ctx: DeterministicContext) -> dict | None:
    """급여 계좌: 채널이 mobile 또는 web 일 때만."""
    channel = ctx.context.get("channel", "")
    if channel in ["mobile", "web"]:
        if "급여" in ctx.query:
            return {"tool_name": "get_balance", "params": {"account": "salary", "channel": channel}}
        if "월급" in ctx.query:
            return {"tool_name": "get_transactions", "params": {"account": "salary", "limit": 3}}
    return None


@deterministic_tool(mcp_id="fx-service")
def fx_amount_threshold(ctx: DeterministicContext) -> dict | None:
    """외화 환전 금액(DataPart usd)이 만 달러 이상."""
    usd = [d["usd"] for d in ctx.a2a_data or [] if "usd" in d]
    if usd and usd[0] >= 10000:
        return {
            "tool_name": "get_exchange_rate",
            "params": {"currency": "USD", "amount": usd[0], "preferential": True},
        }
    return None


@deterministic_tool(mcp_id="doc-service")
def certificate_request(ctx: DeterministicContext) -> dict | None:
    if "증명서" in ctx.query:
        kind = "balance" if "잔액" in ctx.query else "transaction" if "거래" in ctx.query else "account"
        return {
            "tool_name": "issue_certificate",
            "params": {"kind": kind, "user_id": ctx.context.get("userId")},
        }
    return None


@deterministic_tool(mcp_id="fraud-service")
def phishing(ctx: DeterministicContext) -> dict | None:
    """보이스피싱 의심 키워드."""
    if any(w in ctx.query for w in ["보이스피싱", "검찰", "안전계좌"]):
        return {"tool_name": "flag_transaction", "params": {"level": "critical", "query": ctx.query}}
    return None


@deterministic_tool(mcp_id="fraud-service")
def strict_user_check(ctx: DeterministicContext) -> dict | None:
    """userId가 없으면 KeyError (의도적으로 실패하는 규칙: 오류도 같아야 함)."""
    if "본인확인" in ctx.query:
        user = ctx.context["userId"]
        return {"tool_name": "verify_user", "params": {"user": user}}
    return None


@deterministic_tool(mcp_id="loan-service")
def credit_score(ctx: DeterministicContext) -> dict | None:
    score = ctx.context.get("creditScore")
    if score is None:
        return None
    if score >= 900:
        return {"tool_name": "get_loan_rates", "params": {"product": "prime"}}
    elif score >= 700:
        if "대출" in ctx.query:
            return {"tool_name": "get_loan_rates", "params": {"product": "standard"}}
    else:
        return {"tool_name": "check_loan_eligibility", "params": {"score": score}}
    return None


@deterministic_tool(mcp_id="crm")
def chatbot_routing(ctx: DeterministicContext) -> dict | None:
    """챗봇별 라우팅: 상담원 연결."""
    bot = ctx.context.get("chatbotId", "default")
    if "상담원" in ctx.query:
        if bot == "vip-desk":
            return {"tool_name": "connect_agent", "params": {"queue": "vip"}}
        return {"tool_name": "connect_agent", "params": {"queue": bot}}
    return None


@deterministic_tool(mcp_id="account-service")
def multi_tool_account(ctx: DeterministicContext) -> dict | None:
    """두 도구 중 하나: 적금은 get_savings, 예금은 get_deposits."""
    if "적금" in ctx.query:
        return {"tool_name": "get_savings", "params": {"user_id": ctx.context.get("userId")}}
    if "예금" in ctx.query:
        return {"tool_name": "get_deposits", "params": {"user_id": ctx.context.get("userId")}}
    return None


@deterministic_tool(mcp_id="kb")
def filename_keyword(ctx: DeterministicContext) -> dict | None:
    names = [str(f.get("name", "")).lower() for f in ctx.a2a_files or []]
    if any(n.endswith(".xlsx") for n in names):
        return {"tool_name": "search_faq", "params": {"q": "엑셀 업로드", "files": len(names)}}
    return None


@deterministic_tool(mcp_id="loan-service")
def loan_term(ctx: DeterministicContext) -> dict | None:
    """대출기간: months가 숫자가 아니면 대입에서 실패 (안내 경로는 그 값을 쓰지 않음)."""
    if "대출기간" not in ctx.query:
        return None
    long_term = ctx.context.get("months", 12) > 24
    if "안내" in ctx.query:
        return {"tool_name": "get_loan_rates", "params": {"product": "term"}}
    return {"tool_name": "get_loan_rates", "params": {"long": long_term}}


# --- UNTRANSLATABLE: each of these must be listed with its line ---------------------------


@deterministic_tool(mcp_id="crm")
def vip_by_global_list(ctx: DeterministicContext) -> dict | None:
    """UNTRANSLATABLE: a module-level list."""
    if ctx.context.get("chatbotId") in VIP_CHATBOTS:
        return {"tool_name": "get_customer_profile", "params": {}}
    return None


@deterministic_tool(mcp_id="kb")
def normalised_search(ctx: DeterministicContext) -> dict | None:
    """A pure module-level helper: put in place."""
    if "통장분실" in _normalise(ctx.query):
        return {"tool_name": "search_faq", "params": {"q": "통장 재발급"}}
    return None


@deterministic_tool(mcp_id="account-service")
def audit_log_lookup(ctx: DeterministicContext) -> dict | None:
    """UNTRANSLATABLE: I/O (logging)."""
    logger.info("lookup %s", ctx.query)
    if "조회" in ctx.query:
        return {"tool_name": "get_balance", "params": {}}
    return None


@deterministic_tool(mcp_id="fraud-service")
def accumulate_amounts(ctx: DeterministicContext) -> dict | None:
    """UNTRANSLATABLE: a loop with effects."""
    total = 0
    for d in ctx.a2a_data or []:
        total += d.get("amount", 0)
    if total > LARGE_TRANSFER:
        return {"tool_name": "flag_transaction", "params": {"total": total}}
    return None


@deterministic_tool(mcp_id="doc-service")
def parse_json_part(ctx: DeterministicContext) -> dict | None:
    """UNTRANSLATABLE: try/except."""
    try:
        payload = json.loads(ctx.query)
    except ValueError:
        return None
    return {"tool_name": "parse_document", "params": {"payload": payload}}


@deterministic_tool(mcp_id="card-service")
def dynamic_tool_name(ctx: DeterministicContext) -> dict | None:
    """UNTRANSLATABLE: the tool name is computed."""
    if "카드" in ctx.query:
        return {"tool_name": "get_" + ctx.context.get("kind", "card_status"), "params": {}}
    return None


@deterministic_tool(mcp_id="loan-service")
def type_checked_amount(ctx: DeterministicContext) -> dict | None:
    """UNTRANSLATABLE: isinstance is not in the rule language."""
    amount = ctx.context.get("amount")
    if isinstance(amount, int) and amount > 1000:
        return {"tool_name": "check_loan_eligibility", "params": {"amount": amount}}
    return None


@deterministic_tool(mcp_id="kb")
def not_listed_faq(ctx: DeterministicContext) -> dict | None:
    """Decorated but not in DETERMINISTIC_TOOLS: imported as a disabled rule."""
    if "공지" in ctx.query:
        return {"tool_name": "search_faq", "params": {"q": "공지사항"}}
    return None


DETERMINISTIC_TOOLS = [
    card_lost,
    balance_lookup,
    recent_transactions,
    transfer_limit_by_chatbot,
    transfer_limit_default,
    loan_rates,
    loan_eligibility_by_amount,
    loan_small_amount,
    card_status,
    card_by_tool_list,
    fx_rate,
    fx_remittance,
    parse_pdf,
    large_attachment,
    id_card_image,
    faq_search,
    faq_english,
    branch_hours,
    large_transfer_review,
    foreign_login,
    velocity_check,
    vip_profile,
    complaint,
    address_change,
    tier_by_datapart,
    dormant_account,
    account_opening,
    mortgage_ltv,
    repayment_schedule,
    card_limit_increase,
    english_help,
    tool_prefix,
    session_resume,
    salary_account,
    fx_amount_threshold,
    certificate_request,
    phishing,
    strict_user_check,
    credit_score,
    chatbot_routing,
    multi_tool_account,
    filename_keyword,
    loan_term,
    vip_by_global_list,
    normalised_search,
    audit_log_lookup,
    accumulate_amounts,
    parse_json_part,
    dynamic_tool_name,
    type_checked_amount,
]
