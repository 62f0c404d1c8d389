//! The pattern rules: regular expressions over the folded text (lower case, Latin diacritics
//! removed, whitespace collapsed to single spaces, lookalikes folded; see `normalise`).
//!
//! Each rule has a stable id that receipts name. Rules are written for a family of phrasings,
//! never for one sentence: a verb from a list, a few free words, a noun from a list. Where a
//! language puts the verb last (German), both orders are written. A match of a rule about asking
//! for secrets is an ask unless a negation scopes the ask itself or the ask is someone else's,
//! reported (see `negation`); a few rules have a veto for a known innocent reading of their match.
//!
//! Rules with the same id form one group: the screen deduplicates and counts findings per group.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::OnceLock;

use regex::Regex;

use super::Category;
use super::negation::ask_is_cancelled;

/// What is checked about a match before it counts.
pub(super) enum MatchCheck {
    /// Every match counts.
    None,
    /// A secret ask: it does not count when a negation scopes it or it is reported speech.
    SecretAsk,
    /// A match that this pattern also matches is an innocent reading and does not count.
    Veto(Regex),
}

pub(super) struct Rule {
    pub check: MatchCheck,
    /// Also run over the loose view of the text (leetspeak, split words; word rules only).
    pub loose: bool,
    pub regex: Regex,
}

impl Rule {
    /// Whether the match `m` of the folded text `folded` counts as a finding.
    pub fn accepts(&self, folded: &str, m: Range<usize>) -> bool {
        match &self.check {
            MatchCheck::None => true,
            MatchCheck::SecretAsk => !ask_is_cancelled(folded, m, secret_nouns()),
            MatchCheck::Veto(veto) => !veto.is_match(&folded[m]),
        }
    }
}

/// The rules that share one id.
pub(super) struct RuleGroup {
    pub id: &'static str,
    pub category: Category,
    pub rules: Vec<Rule>,
}

/// Up to `n` free words between two parts of a phrase.
fn gap(n: usize) -> String {
    format!(r"(?: [^\s.!?;。！？]+){{0,{n}}}?")
}

// Shared vocabularies.
const EN_QUALIFIER: &str = r"(?:previous|prior|earlier|above|preceding|former|original|initial|system|developer|safety|your|all|any|existing|old|current|given)";
const EN_RULE_NOUN: &str = r"(?:instructions?|prompts?|rules|directives?|guidelines|guidance|guardrails|context|messages|commands|orders|constraints|programming|polic(?:y|ies)|restrictions|directions|training)";
const EN_ASK_VERB: &str = r"(?:enter|provide|send|paste|share|submit|input|give|include|type|upload|supply|pass|post|attach|tell us|reveal|reply with|respond with|forward|export|disclose|fill in|put|email|dm|message us|hand over|let us know|let us have|tell me|show us|show me|type in|key in|dictate|read out|(?:drop|insert|place|add|import|confirm|plug in)(?: (?:us|in|here))? your)";
/// "by entering your seed phrase": an instruction phrased as a means.
const EN_ASK_GERUND: &str = r"(?:entering|providing|sending|pasting|sharing|submitting|typing|uploading|supplying|giving|importing|adding|inserting|dropping|including|attaching|forwarding)";
/// The verbs of an ask for "it" after the secret was named ("your seed phrase: just enter it").
const EN_PRONOUN_ASK: &str = r"(?:enter|paste|type|type in|send|share|provide|submit|give us|upload|put|drop|include|attach|forward|post|input|supply|reply with|tell us|hand over|add|insert)";
/// Where a secret is told to go ("goes in the X-Seed header", "pasted in the first field").
const EN_DESTINATION: &str = r"(?:field|header|body|form|box|parameter|param|query|request|input|payload|url|memo|textbox|text box)";
const EN_NEED: &str = r"(?:needs?|requires?|required|must (?:have|provide|include|send)|asks? for)";
const PRIVATE_KEY: &str = r"(?:(?:private|secret|signing|wallet|priv)[ _-]?keys?|privkeys?)";
const SEED_PHRASE: &str = r"(?:(?:seed|recovery|mnemonic|backup|secret|wallet)[ _-]?(?:phrase|words)|(?:wallet|recovery|backup|master|secret)[ _-]?seeds?|mnemonics?|(?:12|24|twelve|twenty-four)[ -]words?(?: phrase| seed)?)";
const PASSWORD: &str = r"(?:passwords?|passphrases?|passcodes?|pin codes?|2fa codes?|otp codes?|one-time (?:codes?|passwords?)|login credentials)";
/// Credentials are a secret when they are the reader's ("your exchange credentials"); "process
/// credentials" or "provide user credentials" in technical prose are not an ask.
const YOUR_CREDENTIALS: &str = r"your (?:[^\s.!?;。！？]+ ){0,2}?credentials";
const API_SECRET: &str = r"(?:api[ _-]?(?:keys?|secrets?|tokens?)|access[ _-]?tokens?|bearer tokens?|auth(?:orization)?[ _-]?tokens?|secret tokens?|session (?:tokens?|cookies?)|client[ _-]?secrets?|jwts?|openai keys?)";
const AUTH_HEADER: &str = r"(?:authorization|proxy-authorization|x-api-key|api-key|cookies?|x-auth-token|x-access-token|bearer)";
const FUND_NOUN: &str =
    r"(?:funds|balances?|usdc|eth|tokens|assets|crypto|money|coins|holdings|wallet|savings)";
const URLISH: &str = r"(?:https?://|www\.|[a-z0-9-]+\.[a-z]{2,}\b)";

/// How a spec's matches are checked (the veto as a pattern, compiled with the rules).
enum CheckSpec {
    None,
    SecretAsk,
    Veto(&'static str),
}

struct Spec {
    id: &'static str,
    category: Category,
    check: CheckSpec,
    loose: bool,
    pattern: String,
}

fn word_rule(id: &'static str, category: Category, pattern: String) -> Spec {
    Spec {
        id,
        category,
        check: CheckSpec::None,
        loose: true,
        pattern,
    }
}

/// A word rule with a veto: a match that `veto` also matches does not count.
fn vetoed_rule(id: &'static str, category: Category, pattern: String, veto: &'static str) -> Spec {
    Spec {
        id,
        category,
        check: CheckSpec::Veto(veto),
        loose: true,
        pattern,
    }
}

fn secret_rule(id: &'static str, pattern: String) -> Spec {
    Spec {
        id,
        category: Category::SecretAsk,
        check: CheckSpec::SecretAsk,
        loose: true,
        pattern,
    }
}

fn literal_rule(id: &'static str, category: Category, pattern: String) -> Spec {
    Spec {
        id,
        category,
        check: CheckSpec::None,
        loose: false,
        pattern,
    }
}

/// The forms of an ask that name the secret first and then ask for it: told where it goes, or
/// asked for as "it" in an imperative.
fn noun_then_ask(noun: &str) -> String {
    format!(
        r"(?:\b{noun}\b,? (?:(?:is|are|must be|should be|can be|gets?|will be) )?(?:pasted|entered|typed|sent|included|provided|placed|put|passed|submitted|inserted|dropped|goes|go|belongs?) (?:in|into|as|inside|via|through|under) (?:the |a |an |your )?(?:[^\s.!?;。！？]+ ){{0,2}}?{EN_DESTINATION}\b|\b{noun}\b[^.!?;。！？]{{0,60}}?(?:[,:(]| just| simply| please| then| and| now| kindly| to| must| should| can| you)\s*{EN_PRONOUN_ASK} (?:it|them)\b)"
    )
}

fn specs() -> Vec<Spec> {
    use Category::*;
    let g2 = gap(2);
    let g3 = gap(3);
    let g4 = gap(4);
    let g6 = gap(6);
    let g8 = gap(8);
    let mut specs = vec![
        // ---- Injection: overriding earlier instructions ----
        word_rule("inj.ignore-previous", Injection, format!(
            r"\b(?:ignore|disregard|forget|override|bypass|discard|abandon|neglect|overlook|dismiss|drop|skip|set aside|put aside|throw out|ditch|scrap)\b{g3} {EN_QUALIFIER}(?: [^\s.!?;。！？]+){{0,2}}? {EN_RULE_NOUN}\b")),
        word_rule("inj.ignore-previous", Injection,
            r"\b(?:ignore|disregard|forget)\b(?: (?:all|everything|anything|what|whatever|that|the|you|were|was|have|been|told|said|written|stated|is|i|we|ve|'ve))*? (?:above|before|previously|earlier|so far|until now|up to now)\b".to_string()),
        word_rule("inj.ignore-previous", Injection, format!(
            r"\b(?:ignore|disregard|forget|override|bypass|discard|drop|set aside|put aside|throw out|ditch|scrap)\b (?:(?:all|any|the|your|of) )*{EN_RULE_NOUN} (?:that )?(?:you (?:were|have been|'ve been|got|received)|(?:were )?given to you|someone gave you)\b")),
        word_rule("inj.ignore-previous", Injection,
            r"\b(?:ignore|disregard|forget|set aside|put aside|throw out|ditch|scrap|discard|override)\b (?:whatever|everything|anything|all(?: that)?|what) (?:[^\s.!?;。！？]+ ){0,3}?(?:told|taught|instructed|said|wrote|gave|programmed|trained)\b".to_string()),
        word_rule("inj.ignore-previous", Injection, format!(
            r"\b(?:ignora|ignorar|olvida|olvidar|olvide|olviden|descarta|descartar|descarte|omite|omitir|omita|desatiende|desatender|desobedece|desobedecer|haz caso omiso de|hacer caso omiso de|ignore|ignoren|ignorad|ignorem|esqueca|esquecer|esquece|esquecam|desconsidere|desconsiderar|desconsidera|despreze|desprezar|ignori|ignorare|ignorate|dimentica|dimenticare|dimentichi|tralascia|tralasciare)\b{g3} (?:instrucciones|indicaciones|reglas|ordenes|directrices|normas|consignas|instrucoes|regras|ordens|diretrizes|orientacoes|comandos|istruzioni|regole|indicazioni|direttive)\b")),
        word_rule("inj.ignore-previous", Injection, format!(
            r"\b(?:ignore|ignorez|ignorer|oublie|oubliez|oublier|ne tiens pas compte|ne tenez pas compte)\b(?: [^\s.!?;。！？]+){{0,2}}? (?:les|tes|vos|toutes|ces|leurs|des)\b{g2} (?:instructions|consignes|regles|directives|ordres|indications)\b")),
        word_rule("inj.ignore-previous", Injection, format!(
            r"\b(?:ignoriere|ignorier|ignorieren sie|ignoriert|vergiss|vergesst|vergessen sie|missachte|missachten sie|verwirf|verwerfen sie)\b{g4} (?:anweisungen|instruktionen|regeln|befehle|vorgaben|richtlinien|anordnungen)\b")),
        word_rule("inj.ignore-previous", Injection, format!(
            r"\b(?:vorherigen|bisherigen|vorigen|obigen|fruheren|alten|ursprunglichen|system)\w* (?:anweisungen|instruktionen|regeln|befehle|vorgaben){g2} (?:ignorieren|vergessen|missachten)\b")),
        word_rule("inj.ignore-previous", Injection, format!(
            r"\b(?:игнорируй|игнорируйте|проигнорируй|проигнорируйте|забудь|забудьте|отбрось|отбросьте|не обращай внимания на|не обращайте внимания на|не следуй|не следуйте|отмени|отмените)\b{g3} (?:инструкци|указани|правил|команд|установк|директив|ограничени)\w*")),
        word_rule("inj.ignore-previous", Injection,
            r"(?:忽略|忽视|无视|無視|忽視|忘记|忘記|忘掉|不要理会|不要理會|不要遵守|不要遵循|放弃|放棄|抛弃|拋棄)(?:[^。！？.!?]{0,12}(?:指令|指示|规则|規則|提示|设定|設定|要求|命令|约束|約束|限制)|(?:上面|以上|之前|前面|先前|上述)的?(?:内容|內容|一切|所有内容|所有內容|文字))".to_string()),
        word_rule("inj.ignore-previous", Injection, format!(
            r"\b{EN_QUALIFIER} (?:instructions|rules|directives|guidelines){g2} (?:no longer apply|(?:are|is) (?:now )?(?:void|null|cancel(?:l)?ed|revoked|overridden|superseded|suspended|outdated|obsolete|invalid|replaced)|do not apply|don't apply)\b")),

        // ---- Injection: new role or persona ----
        word_rule("inj.role-override", Injection,
            r"\byou are (?:now|no longer|from now on)\b(?: (?:a|an|the|my|in|free|unrestricted|jailbroken|dan|operating|acting|going to|allowed|permitted|authorized|required|an?))".to_string()),
        word_rule("inj.role-override", Injection,
            r"\b(?:from now on|from this point (?:on|onwards?|forward)|from here on(?: out)?|henceforth|starting now),? (?:you|your|always|only|respond|reply|answer|act|behave|ignore|never|pretend)\b".to_string()),
        word_rule("inj.role-override", Injection,
            r"\b(?:you (?:now )?work for (?:us|me)|you(?:'re| are) (?:now )?(?:working|acting) (?:for|on behalf of) (?:us|me))\b".to_string()),
        word_rule("inj.role-override", Injection,
            r"\b(?:pretend (?:that )?(?:you are|you're|to be|you were)\b|(?:imagine|assume) (?:that )?you(?: are|'re) (?:now )?(?:an? |the )?(?:unrestricted|unfiltered|uncensored|jailbroken|evil|rogue|free|different) )".to_string()),
        word_rule("inj.role-override", Injection,
            r"\b(?:act|behave|respond|reply|roleplay|role-play) as (?:if you (?:are|were) )?(?:an? |the )?(?:unrestricted|unfiltered|uncensored|jailbroken|evil|malicious|rogue|dan\b|developer mode|ai (?:with|without)|assistant (?:with|without)|model (?:with|without))".to_string()),
        word_rule("inj.role-override", Injection,
            r"\b(?:(?:enable|enter|activate|switch to|turn on)\b (?:the )?(?:developer|dev|god|dan|jailbreak|debug|sudo|admin|unrestricted) mode\b|developer mode (?:enabled|activated|on)\b|do anything now\b)".to_string()),
        word_rule("inj.role-override", Injection,
            r"\byour (?:new|real|actual|true|only|primary) (?:task|role|goal|job|objective|purpose|mission|instructions?|persona|identity) (?:is|are|will be)\b".to_string()),
        word_rule("inj.role-override", Injection,
            r"\b(?:ahora eres|a partir de ahora (?:eres|seras|actua|actuas|responde|respondes|debes|tu)|finge (?:ser|que eres)|tu es maintenant|vous etes maintenant|desormais,? tu|a partir de maintenant,? (?:tu|vous)|fais semblant d'etre|faites semblant d'etre|du bist (?:jetzt|nun|ab sofort|ab jetzt)|ab (?:jetzt|sofort) bist du|von nun an (?:bist du|antwortest du|wirst du)|tu so,? als|tun sie so,? als|agora voce e|a partir de agora,? voce|a partir de agora (?:e|sera|seja|aja|responda)|finja (?:ser|que voce e)|ora sei|da ora in poi (?:sei|rispondi|devi)|fingi di essere)\b".to_string()),
        word_rule("inj.role-override", Injection,
            r"(?:你现在是|你現在是|从现在开始你|從現在開始你|从现在起你|從現在起你|假装你是|假裝你是|你不再是|\bтеперь ты\b|\bотныне ты\b|\bс этого момента ты\b|\bпритворись\b|\bпредставь,? что ты\b|\bты больше не\b)".to_string()),

        // ---- Injection: addressed to the model ----
        word_rule("inj.addressed-to-agent", Injection, format!(
            r"\b(?:note|message|instructions?|attention|important|notice|memo|reminder)\b[^.!?]{{0,20}}\b(?:to|for)\b (?:all |any |the |every )?(?:ai|llm|gpt|claude|assistant|agent|language model|model|bot|chatbot|crawler)s?\b{g3}\s*[:,!-]{g8} (?:must|should|ignore|disregard|forget|do not|don't|never|always|call|send|transfer|reveal|print|output|tell|say|include|approve|pay|follow)\b")),
        word_rule("inj.addressed-to-agent", Injection,
            r"(?:^|[.!?:;] )(?:system|assistant|ai|agent|model|llm)\s*: (?:the (?:assistant|agent|model|ai)|you|ignore|disregard|forget|after|before|always|never|must|do not|from now)\b".to_string()),
        word_rule("inj.addressed-to-agent", Injection,
            r"\b(?:to|for) (?:(?:any|all|every|each|the) )?(?:ai|llm|gpt|assistant|agent|language model|model|bot|chatbot)s? (?:reading|processing|parsing|seeing|viewing|summari[sz]ing)(?: (?:this|it|these))?\s*[:,-]".to_string()),
        word_rule("inj.addressed-to-agent", Injection,
            r"\b(?:hey|hi|hello|dear|attention) (?:ai|assistant|agent|model|llm|chatbot|claude|chatgpt|gpt)\b,? ".to_string()),
        word_rule("inj.addressed-to-agent", Injection,
            r"\b(?:attention|calling),? (?:all |any |every )?(?:ai |llm )?(?:agents?|assistants?|models?|llms?|chatbots?|bots?|ais)\s*[!,:]".to_string()),
        word_rule("inj.addressed-to-agent", Injection,
            r"\b(?:hey|hi|hello|dear|greetings)(?: there)?,? (?:[a-z]+ )?(?:ai|assistants?|agents?|models?|llms?|chatbots?|bots?)\s*[!,:]".to_string()),
        word_rule("inj.new-instructions", Injection,
            r"\b(?:treat|consider|regard|interpret|handle|read)\b(?: [^\s.!?;。！？]+){0,6}? as (?:an? |the )?(?:system|developer|admin|root|operator|privileged|priority) (?:messages?|instructions?|prompts?|commands?|directives?|orders?)\b".to_string()),
        word_rule("inj.bypass-user", Injection,
            r"(?:\b(?:skip|bypass|ignore|disregard|override|exceed|circumvent|get around|disable|turn off)\b(?: [^\s.!?;。！？]+){0,2}? (?:the |your |any |their )?(?:user'?s?|human'?s?|owner'?s?|principal'?s?)? ?(?:spending|budget|payment|price|cost|purchase) (?:limits?|caps?|budgets?|checks?|confirmations?|approvals?|rules?)\b|\b(?:the |your )?(?:user|human|owner|principal)(?:'s)? (?:has |have )?(?:already |pre-?)(?:approved|consented|authori[sz]ed|agreed|confirmed)\b|\bpre-?approved (?:all |every |any )?(?:payments?|charges?|spending|transactions?|calls?|purchases?)\b|\bno need to (?:confirm|check|ask|verify|consult)\b(?: [^\s.!?;。！？]+){0,3}? (?:with )?(?:the |your )?(?:user|human|owner|principal|them)\b|\b(?:proceed|continue|pay|approve|go ahead|sign)\b(?: [^\s.!?;。！？]+){0,2}? without (?:asking|confirming|checking|confirmation|approval|permission|consent)\b)".to_string()),
        word_rule("inj.new-instructions", Injection,
            r"(?:\b(?:new|updated|real|actual|revised|secret|hidden|additional|overriding|priority) (?:system )?(?:instructions?|directives?|prompt|orders)\s*:|\bsystem (?:instructions?|override|directives?|prompt|message)\s*:|\b(?:nuevas? instrucciones|nouvelles? (?:instructions|consignes)|neue (?:anweisungen|instruktionen|systemanweisung)|novas? instrucoes|nuove istruzioni)\s*:|(?:新的?指令|新的?系统指令|系统指令)\s*[:：])".to_string()),
        word_rule("inj.new-instructions", Injection,
            r"\bнов\w* (?:инструкци|указани)\w*\s*:".to_string()),
        literal_rule("inj.chat-template", Injection,
            r"(?:<\|(?:im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id)\|>|\[/?inst\]|<</?sys>>|</?(?:system|assistant)>|(?:^|\s)#{1,3} ?(?:system|new instructions?|instructions?)\s*:)".to_string()),

        // ---- Injection: leaking the prompt or the environment ----
        word_rule("inj.reveal-prompt", Injection, format!(
            r"\b(?:reveal|print|show|output|repeat|display|leak|dump|disclose|expose|share|write out|spell out|recite|tell me|give me|send me|paste)\b{g4} (?:your (?:[^\s.!?;。！？]+ ){{0,2}}?(?:prompt|instructions|guidelines|rules|directives|configuration|environment variables|env vars|context)|(?:the )?(?:system|initial|original|hidden|secret|internal|developer|pre) (?:prompt|instructions|message)|(?:the )?(?:contents? of )?(?:your |the )?(?:environment variables|env vars|\.env file))\b")),
        word_rule("inj.reveal-prompt", Injection,
            r"\bwhat (?:is|are|'s) your (?:system prompt|initial instructions|instructions|rules|guidelines)\b".to_string()),
        word_rule("inj.reveal-prompt", Injection, format!(
            r"\b(?:revela|muestra|imprime|dime|comparte|repite|revele|revelez|affiche|affichez|montre|montrez|repete|repetez|donne|donnez|zeige|zeig|verrate|wiederhole|mostre|mostra|imprima|diga|repita|rivela|stampa|ripeti)\b{g3} (?:prompt (?:del sistema|systeme|du systeme|initial|do sistema|di sistema)|instrucciones (?:del sistema|iniciales|ocultas)|tus instrucciones|(?:tes|vos) (?:instructions|consignes)|system-?prompt|(?:deine|ihre) (?:anweisungen|instruktionen|systemanweisungen)|(?:suas|tuas) instrucoes|le tue istruzioni)\b")),
        word_rule("inj.reveal-prompt", Injection,
            r"(?:(?:显示|輸出|输出|泄露|泄漏|告诉我|告訴我|打印|透露|给我|給我|复述|複述)[^。！？]{0,10}(?:系统提示|系統提示|系统指令|系統指令|提示词|提示詞|初始指令|系统设定)|\b(?:покажи|выведи|раскрой|сообщи|напечатай|повтори)\w*(?: [^\s.!?;。！？]+){0,3}? (?:системн\w* (?:промпт|инструкци|подсказк)\w*|сво(?:и|ё|й) (?:инструкци|промпт)\w*))".to_string()),

        // ---- Injection: moving the agent's money ----
        // Into the reader's own wallet is where the reader's money belongs: not a theft.
        vetoed_rule("inj.send-funds", Injection, format!(
            r"\b(?:send|transfer|wire|move|pay|deposit|forward|sweep)\b{g3} (?:all|your|the entire|the whole|the remaining|remaining|entire|whole|every|max|maximum) (?:of )?(?:[^\s.!?;。！？]+ ){{0,3}}?{FUND_NOUN}\b"),
            r"\b(?:in|into|to|onto|inside) your (?:own )?wallet$"),
        literal_rule("inj.send-funds", Injection,
            r"\b(?:send|transfer|wire|deposit|forward|tip|donate)\b(?: [^\s.!?;。！？]+){0,6}? (?:to|into|at) 0x[0-9a-f]{40}\b".to_string()),
        word_rule("inj.send-funds", Injection, format!(
            r"\b(?:envia|envie|enviad|transfiere|transfiera|manda|mande|deposita|transfira|transfere|deposite|envoie|envoyez|transfere|transferez|virez|vire|deposez|sende|senden sie|schicke|schicken sie|uberweise|uberweisen sie|transferiere|transferieren sie)\b{g3} (?:(?:todos|todo|tus|sus|los|el|tu|su|os|o|seus|seu|sua|suas|a|tous|tout|tes|vos|les|le|ton|votre|alle|all|dein|deine|ihr|ihre|das|die|gesamtes?|gesamten) )*(?:fondos|saldo|usdc|tokens|criptomonedas|dinero|activos|fundos|criptomoedas|dinheiro|ativos|fonds|solde|jetons|cryptos?|argent|actifs|guthaben|gelder|geld|token|kryptowahrung|vermogen|mittel)\b")),
        word_rule("inj.send-funds", Injection,
            r"(?:\b(?:отправ|перевед|переве|перечисл|вывед|скин)\w*(?: [^\s.!?;。！？]+){0,3}? (?:(?:все|свои|весь|свой|ваши|ваш) )*(?:средства|баланс|деньги|токены|usdc|активы|крипт\w*)|(?:转账|转移|转出|发送|转给|汇款|打款|轉帳|轉移)[^。！？]{0,18}(?:资金|余额|代币|代幣|餘額|資金|usdc)|把[^。！？]{0,10}(?:资金|余额|代币|usdc|钱)[^。！？]{0,10}(?:转|发|打))".to_string()),

        // ---- Injection: calling something else, exfiltration, concealment ----
        word_rule("inj.call-other", Injection, format!(
            r"\binstead of (?:calling|using|querying|asking|trusting|answering)\b(?: [^\s.!?;。！？]+){{0,5}}?,? (?:always |only |first )?(?:call|use|invoke|query|fetch|visit|contact|request|send)\b{g6} (?:{URLISH}|tool|endpoint|api|function|url|server)")),
        word_rule("inj.call-other", Injection,
            r"\b(?:must|should|always|first)\b(?: now)? (?:call|invoke|use|run|execute|trigger)\b (?:the )?(?:tool|function|plugin|action)\b".to_string()),
        word_rule("inj.call-other", Injection, format!(
            r"\b(?:fetch|visit|open|load|read|go to|navigate to|browse to|retrieve|download)\b{g3} https?://\S+{g8} (?:and|then) (?:follow|execute|obey|run|do|carry out|apply)\b")),
        word_rule("inj.call-other", Injection,
            r"\bfollow (?:the |these |those |any )?(?:instructions|directions|commands|orders|steps) (?:at|on|from|in|found at) https?://".to_string()),
        // An order to decode something and then obey it: what the encoding hides is meant as
        // instructions (what it decodes to is screened too, see `blobs::encoded_texts`). Decoding
        // to read or parse data is not this: the second verb obeys, or runs "it".
        word_rule("inj.decode-and-follow", Injection, format!(
            r"\b(?:decode|decrypt|unscramble|deobfuscate|base64-?decode|b64decode|atob|decodifica|decodificar|decodifique|decodifiquen|descodifica|decodez|decodes|dekodiere|dekodieren sie|entschlussele|decodifichi)\b{g8},? (?:and |then |and then |y |e |et |und |dann |, )?(?:follow|obey|comply with|act on|carry out|do what (?:it|they) says?|(?:run|execute|apply) (?:it|them|the (?:result|output|decoded \S+|instructions?|commands?|text))|sigue|siga|sigan|seguir|obedece|obedezca|obedecer|cumple|ejecuta(?:lo|las|los)?|suis|suivez|obeis|obeissez|executez|execute-le|befolge|befolgen sie|gehorche|fuhre (?:sie|ihn|es) aus|segui|seguite|obbedisci|esegui(?:lo|le)?)\b")),
        word_rule("inj.decode-and-follow", Injection,
            r"(?:解码|解碼|解密|译码|譯碼)[^。！？]{0,20}(?:执行|執行|遵循|遵守|照做|按照|听从|聽從)".to_string()),
        word_rule("inj.exfiltrate", Injection, format!(
            r"\b(?:exfiltrat\w*|(?:send|post|forward|upload|leak|share|include|append|submit|report|copy|attach|transmit|collect)\b{g6} (?:conversation|chat history|chat log|messages|user data|user'?s? data|personal data|private data|credentials|api (?:keys?|tokens?)|tokens|secrets?|session|cookies?|environment variables|env vars|memory|previous messages|system prompt|private keys?|wallet keys?|emails?|email address(?:es)?|passwords?)\b{g8} (?:to|into|at|via) (?:{URLISH}|webhook|this (?:url|endpoint|address)|our (?:server|endpoint)))")),
        // A negation before the verb ("切勿将私钥提交到...", never commit keys to...) is advice: the
        // match takes in a negation just before the noun, and a negation anywhere in it vetoes.
        vetoed_rule("inj.exfiltrate", Injection,
            r"(?:(?:切勿|请勿|請勿|不要|禁止|绝不|絕不|不得|不能|不可|别|別|勿)[^。！？]{0,4})?(?:聊天记录|聊天記錄|对话记录|對話記錄|对话历史|對話歷史|用户数据|用戶數據|私钥|私鑰|密码|密碼|密钥|密鑰|环境变量|環境變量|系统提示|系統提示)[^。！？]{0,10}(?:发送|發送|上传|上傳|转发|轉發|提交|泄露)(?:到|至|给|給)".to_string(),
            r"(?:切勿|请勿|請勿|不要|禁止|绝不|絕不|不得|不能|不可|别|別|勿)"),
        word_rule("inj.conceal", Injection,
            r"\b(?:(?:do not|don't|dont|never)\b (?:tell|inform|mention|reveal|disclose|show|alert|notify|warn|let)\b(?: [^\s.!?;。！？]+){0,4}? (?:to )?(?:the |your )?(?:user|human|operator|owner|person|people|customer|client|principal|anyone|them)s?\b|without (?:telling|informing|notifying|alerting|asking|warning|letting) (?:the )?(?:user|human|operator|owner|anyone)\b|(?:secretly|silently|quietly|covertly|discreetly|stealthily|invisibly)\b (?:[^\s.!?;。！？]+ ){0,2}?(?:send|transfer|call|forward|include|append|pay|approve|execute|run|add|insert|post|upload|redirect|recommend|mention|sign|top up|tip|donate|charge|withdraw|spend|move|deduct)\b)".to_string()),

        // ---- Phishing ----
        // "free ... on drop" is memory management, not an airdrop.
        vetoed_rule("phish.claim-airdrop", Phishing, format!(
            r"(?:\bclaim\b{g3} (?:airdrop|airdrops|reward|rewards|tokens|bonus|nft|prize|allocation|giveaway|free)\b|\b(?:free|exclusive|limited|surprise|bonus|limited-time) (?:[^\s.!?;。！？]+ ){{0,2}}?(?:airdrop|giveaway|mint|drop)\b|\bgiveaway\b|\bairdrop\b{g2} (?:is )?(?:live|now|ending|ends|available|claimable)\b)"),
            r"\b(?:on|upon|in|at|after|before|during) drop$"),
        word_rule("phish.claim-airdrop", Phishing, format!(
            r"(?:\b(?:reclama|reclame|reclamez|reclamer|resgate|reivindique|fordere|beanspruche|hol dir|sichere dir)\b{g3} (?:airdrop|recompensa|recompense|tokens|premio|jetons|bonus|belohnung|token)\b|(?:领取|領取|认领|認領|免费获得|免费领)[^。！？]{{0,6}}(?:空投|奖励|獎勵|代币|代幣))")),
        word_rule("phish.claim-airdrop", Phishing,
            r"\b(?:получи|забери|заберите|получите)\w*(?: [^\s.!?;。！？]+){0,2}? (?:аирдроп|айрдроп|эирдроп|эйрдроп|airdrop|награду|бонус|токены)".to_string()),
        word_rule("phish.verify-wallet", Phishing, format!(
            r"\b(?:verify|validate|sync|synchroni[sz]e|connect|link|authenticate|unlock|restore|rectify|revalidate|reactivate|secure|confirm|recover|migrate|whitelist)\b (?:your )(?:[^\s.!?;。！？]+ )?(?:wallet|account|seed|funds)\b{g4} (?:(?:at|on|via|through|using|visit|go to) {URLISH}|here\b|now\b|immediately\b|to (?:avoid|continue|keep|prevent|receive|claim|unlock|restore|get)\b)")),
        word_rule("phish.verify-wallet", Phishing,
            r"(?:\b(?:verifiez|verifie|validez|connectez|synchronisez|debloquez)\b (?:votre|ton) (?:portefeuille|wallet|compte)\b|\b(?:verifica|verifique|valida|conecta|conecte|sincroniza|sincronice|desbloquea)\b (?:tu|su|sua|seu|a sua) (?:billetera|cartera|wallet|monedero|carteira)\b|\b(?:verifiziere|verifizieren sie|bestatige|bestatigen sie|verbinde|verbinden sie|synchronisiere)\b (?:deine|ihre|dein|ihr) (?:wallet|geldborse)\b|(?:验证|驗證|连接|連接|同步|解锁|解鎖)(?:你的|您的)?(?:钱包|錢包))".to_string()),
        word_rule("phish.verify-wallet", Phishing,
            r"\b(?:подтверди|верифицируй|подключи|синхронизируй|разблокируй)\w* (?:свой |ваш )?кошел\w*".to_string()),
        word_rule("phish.urgency", Phishing,
            r"(?:\byour (?:wallet|account|funds|access|listing|api key|address|api access)\b(?: [^\s.!?;。！？]+){0,2}? (?:has been|have been|was|were|is|will be) (?:flagged|suspended|locked|compromised|frozen|restricted|disabled|blocked|deactivated|terminated|blacklisted)\b|\byour (?:[^\s.!?;。！？]+ ){0,3}?(?:expires?|will expire|(?:is|are|will be|gets?) (?:suspended|terminated|locked|deleted)) (?:today|tonight|soon|in \d+ (?:hours?|minutes?))\b|\b(?:suspended|terminated|locked|deleted) (?:today|tonight)\b)".to_string()),
        word_rule("phish.sign-to-claim", Phishing, format!(
            r"\bsign\b{g3} (?:permit|approval|message|transaction|signature|typed data)s?\b{g6} (?:to|and) (?:claim|receive|unlock|get|collect|redeem|activate)\b")),
        literal_rule("phish.unlimited-approval", Phishing,
            r"(?:\b(?:approve|authori[sz]e|grant)\b(?: [^\s.!?;。！？]+){0,3}? (?:unlimited|infinite|max|maximum|all) (?:[^\s.!?;。！？]+ ){0,2}?(?:spending|spend|allowance|approvals?|usdc|tokens?|funds)\b|\bsetapprovalforall\b|\bincreaseallowance\b)".to_string()),

        // ---- Malware ----
        literal_rule("malware.pipe-to-shell", Malware,
            r"(?:\b(?:curl|wget|iwr|irm|invoke-webrequest|invoke-restmethod)\b[^|\n]{0,300}\|\s*(?:sudo\s+)?(?:(?:ba|z|da|k|c|tc)?sh|python[23]?|perl|ruby|node|iex|invoke-expression)\b|\bbase64 (?:-d|--decode|-di)\b[^|\n]{0,60}\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b|\b(?:ba)?sh\s+(?:-c\s+\S?\$\(|<\(\s*)(?:curl|wget)\b)".to_string()),
        literal_rule("malware.powershell", Malware,
            r"(?:\bpowershell(?:\.exe)?\b[^\n]{0,120}\s-(?:e|ec|en|enc|enco|encod|encode|encoded|encodedcommand)\s+[a-z0-9+/=]{20,}|\b(?:iex|invoke-expression)\b\s*\(?\s*\(?\s*new-object\s+(?:system\.)?net\.webclient|\b(?:downloadstring|downloadfile|frombase64string)\s*\()".to_string()),
        literal_rule("malware.reverse-shell", Malware,
            r"(?:/dev/tcp/\S|\bnc(?:at)?\s+(?:-\w+\s+)*-e\s+/bin/|\bmkfifo\b[^\n]{0,80}\bnc\b)".to_string()),
        literal_rule("malware.destructive", Malware,
            r"(?:\brm\s+-(?:rf|fr)\s+(?:/|~|\$home|\*)(?:\s|$|\*)|:\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:|\bmkfs(?:\.\w+)?\s+/dev/|\bdd\s+if=/dev/(?:zero|random|urandom)\s+of=/dev/)".to_string()),
        literal_rule("malware.executable-link", Malware,
            r#"\b(?:https?|ftp)://[^\s/]+/[^\s"'<>]*?\.(?:exe|scr|bat|cmd|pif|ps1|vbs|vbe|jse|wsf|hta|msi|apk|dmg|pkg|jar|lnk|iso)(?:[?#][^\s"'<>]*)?(?:$|[\s"'<>)\].,;])"#.to_string()),
        literal_rule("malware.script-injection", Malware,
            r"(?:<script\b[^>]*\bsrc\s*=|<script\b[^>]*>[^<]{0,2000}</script|\bjavascript:|\bon(?:error|load|mouseover|focus)\s*=|<iframe\b|\bdocument\.cookie\b|\beval\s*\(\s*atob\s*\()".to_string()),
        literal_rule("malware.code-exec", Malware,
            r"\b(?:os\.system|os\.popen|subprocess\.\w+|child_process\.\w+|exec|eval|system)\s*\([^)]{0,200}\b(?:curl|wget|bash|/bin/sh|powershell|nc)\b".to_string()),

        // ---- Secret asks ----
        secret_rule("secret.private-key", format!(
            r"(?:\b(?:{EN_ASK_VERB}|by {EN_ASK_GERUND})\b(?: [^\s.!?;。！？]+){{0,5}}? {PRIVATE_KEY}\b|\b{EN_NEED}\b{g3} (?:your |the |a )?(?:[^\s.!?;。！？]+ )?{PRIVATE_KEY}\b|\b{PRIVATE_KEY}\b(?: [^\s.!?;。！？]+){{0,3}}? (?:is |are )?(?:required|needed|must be (?:provided|sent|included))\b|\bwhat(?: is|'s) your (?:[^\s.!?;。！？]+ )?{PRIVATE_KEY}\b|\b(?:set|fill|populate)\b(?: [^\s.!?;。！？]+){{0,5}}? (?:to|with) (?:your |the |a )(?:[^\s.!?;。！？]+ )?{PRIVATE_KEY}\b)")),
        secret_rule("secret.seed-phrase", format!(
            r"(?:\b(?:{EN_ASK_VERB}|by {EN_ASK_GERUND})\b(?: [^\s.!?;。！？]+){{0,5}}? {SEED_PHRASE}\b|\b{EN_NEED}\b{g3} (?:your |the |a )?(?:[^\s.!?;。！？]+ )?{SEED_PHRASE}\b|\b{SEED_PHRASE}\b(?: [^\s.!?;。！？]+){{0,3}}? (?:is |are )?(?:required|needed|must be (?:provided|sent|included))\b|\bwhat(?: is|'s|are) your (?:[^\s.!?;。！？]+ )?{SEED_PHRASE}\b|\b(?:set|fill|populate)\b(?: [^\s.!?;。！？]+){{0,5}}? (?:to|with) (?:your |the |a )(?:[^\s.!?;。！？]+ )?{SEED_PHRASE}\b)")),
        secret_rule("secret.password", format!(
            r"(?:\b(?:{EN_ASK_VERB}|by {EN_ASK_GERUND})\b(?: [^\s.!?;。！？]+){{0,4}}? (?:(?:your |the |us |me )?(?:[^\s.!?;。！？]+ )?{PASSWORD}|(?:us |me )?{YOUR_CREDENTIALS})\b|\b{EN_NEED}\b{g3} (?:(?:your |the )(?:[^\s.!?;。！？]+ )?{PASSWORD}|{YOUR_CREDENTIALS})\b|\bwhat(?: is|'s|are) your (?:[^\s.!?;。！？]+ )?(?:{PASSWORD}|credentials)\b|\b(?:re-?enter|log in with|sign in with|login with) your (?:[^\s.!?;。！？]+ )?(?:{PASSWORD}|credentials)\b)")),
        secret_rule("secret.api-key", format!(
            r"(?:\b(?:{EN_ASK_VERB}|by {EN_ASK_GERUND})\b(?: [^\s.!?;。！？]+){{0,4}}? {API_SECRET}\b|\b{EN_NEED}\b{g3} (?:your |the |an |a |valid )?(?:[^\s.!?;。！？]+ )?{API_SECRET}\b|\b{API_SECRET}\b(?: [^\s.!?;。！？]+){{0,3}}? (?:is |are )?(?:required|needed|must be (?:provided|sent|included))\b)")),
        secret_rule("secret.private-key", noun_then_ask(PRIVATE_KEY)),
        secret_rule("secret.seed-phrase", noun_then_ask(SEED_PHRASE)),
        secret_rule("secret.password", noun_then_ask(&format!("(?:{PASSWORD}|{YOUR_CREDENTIALS})"))),
        secret_rule("secret.api-key", noun_then_ask(API_SECRET)),
        secret_rule("secret.auth-header",
            r"\b(?:send|give|share|paste|provide|forward|export|copy|hand over)\b (?:(?:us|me) (?:the |your )|your )(?:[^\s.!?;。！？]+ ){0,2}?cookies?\b".to_string()),
        secret_rule("secret.auth-header", format!(
            r"(?:\b(?:send|include|pass|provide|add|attach|set|forward|{EN_NEED})\b{g4} (?:the |your |an? )?(?:{AUTH_HEADER}\b(?: [^\s.!?;。！？]+){{0,2}}?(?: header\b| token\b)|{AUTH_HEADER}:)|\b(?:authorization|proxy-authorization)\s*:\s*(?:bearer|basic|token)\b)")),
        secret_rule("secret.private-key", format!(
            r"(?:\b(?:introduce|introduzca|ingresa|ingrese|envia|envie|proporciona|proporcione|comparte|comparta|escribe|escriba|pega|pegue|dinos|danos|facilita|facilite|necesita|necesitamos|digite|insira|forneca|compartilhe|informe|cole|passe|mande|diga)\b{g3} (?:clave privada|llave privada|clave secreta|chave privada|chave secreta)\b|\b(?:entre[rz]?|saisi(?:r|s|ssez)|envoy(?:er|ez)|envoie|fourni(?:r|s|ssez)|partag(?:er|ez|e)|coll(?:er|ez|e)|donn(?:er|ez|e)|indiqu(?:er|ez)|communiqu(?:er|ez)|tap(?:er|ez))\b{g3} (?:cle privee|cle secrete)\b)")),
        secret_rule("secret.seed-phrase", format!(
            r"(?:\b(?:introduce|introduzca|ingresa|ingrese|envia|envie|proporciona|proporcione|comparte|comparta|escribe|escriba|pega|pegue|dinos|danos|facilita|facilite|digite|insira|forneca|compartilhe|informe|cole|passe|mande|diga)\b{g3} (?:frase semilla|frase de recuperacion|palabras de recuperacion|mnemonico|frase semente|frase-semente|frase de recuperacao|palavras de recuperacao|mnemonica)\b|\b(?:entre[rz]?|saisi(?:r|s|ssez)|envoy(?:er|ez)|envoie|fourni(?:r|s|ssez)|partag(?:er|ez|e)|coll(?:er|ez|e)|donn(?:er|ez|e)|indiqu(?:er|ez)|communiqu(?:er|ez)|tap(?:er|ez))\b{g3} (?:phrase de recuperation|phrase secrete|phrase mnemonique|mots de recuperation)\b)")),
        secret_rule("secret.password", format!(
            r"(?:\b(?:introduce|introduzca|ingresa|ingrese|envia|envie|proporciona|proporcione|comparte|comparta|escribe|escriba|dinos|danos|digite|insira|forneca|compartilhe|informe|mande|diga)\b{g3} (?:contrasena|senha|clave de acceso)\b|\b(?:entre[rz]?|saisi(?:r|s|ssez)|envoy(?:er|ez)|envoie|fourni(?:r|s|ssez)|partag(?:er|ez|e)|donn(?:er|ez|e)|indiqu(?:er|ez)|communiqu(?:er|ez)|tap(?:er|ez))\b{g3} (?:mot de passe|identifiants)\b)")),
    ];
    // German, Chinese and Russian asks: one spec per language.
    let foreign_asks = [
        (
            "secret.private-key",
            de_zh_ru_ask(
                r"privat\w* schlussel|geheim\w* schlussel|api-?schlussel",
                "私钥|私鑰|密钥|密鑰|秘钥|私匙",
                r"приватн\w* ключ|секретн\w* ключ|api-?ключ",
            ),
        ),
        (
            "secret.seed-phrase",
            de_zh_ru_ask(
                r"seed-?phrase|wiederherstellungsphrase|mnemonic",
                "助记词|助記詞|种子短语|種子短語|种子词|恢复短语|恢復短語",
                r"сид-?фраз|seed-?фраз|мнемони|фраз\w* восстановлени|секретн\w* фраз",
            ),
        ),
        (
            "secret.password",
            de_zh_ru_ask(
                r"passwort|kennwort|zugangsdaten",
                "密码|密碼|口令",
                r"парол",
            ),
        ),
    ];
    for (id, patterns) in foreign_asks {
        specs.extend(patterns.into_iter().map(|p| secret_rule(id, p)));
    }
    // Japanese, Korean and Italian asks, one rule for every secret (the noun decides the kind
    // little here; the receipt names the noun).
    specs.push(secret_rule("secret.cjk-ask", format!(
        r"(?:(?:{JA_SECRET})[^。！？.!?]{{0,12}}?(?:入力|送信|送っ|送付|教え|貼り付け|貼っ|共有|提供|知らせ|記入|提出|アップロード|返信)[^。！？.!?\s]{{0,8}}|(?:{KO_SECRET})[^。！？.!?]{{0,16}}?(?:입력|보내|전송|알려|공유|붙여넣|제출|제공)[^\s.!?]*(?: (?:마세요|마십시오|말아\S*|말고|않\S*))?)"
    )));
    specs.push(secret_rule("secret.italian-ask", format!(
        r"\b(?:inserisci|inseriscila|inserite|invia|inviaci|inviate|incolla|incollate|condividi|condividete|fornisci|fornite|scrivi|scrivici|dacci|dammi|comunica|comunicaci|digita|indica|indicaci|mandaci|manda)\b{g3} (?:{IT_SECRET})\b"
    )));
    specs
}

/// An ask for a secret in German (either word order), Chinese and Russian, one pattern each (so
/// that only the Russian one needs Unicode word boundaries); each argument is the alternation of
/// that language's nouns for the secret.
fn de_zh_ru_ask(german: &str, chinese: &str, russian: &str) -> [String; 3] {
    let w = "[^\\s.!?;。！？]";
    [
        format!(
            r"(?:\b(?:gib|gebe|geben sie|sende|senden sie|schicke|schicken sie|teile|teilen sie|nenne|nennen sie|trage|tragen sie|fuge|fugen sie)\b(?: {w}+){{0,3}}? (?:{german})\w*|\b(?:{german})\w*(?: {w}+){{0,4}}? (?:eingeben|angeben|senden|schicken|mitteilen|eintragen|einfugen|teilen)\b)"
        ),
        format!(
            r"(?:(?:输入|輸入|提供|发送|發送|告诉|告訴|分享|填写|填寫|粘贴|貼上|提交|上传|上傳|发给|發給|给我|給我|回复|回覆|告知|交出|导出|導出|附上|填入|录入|錄入|私信|需要|必须提供|必須提供)[^。！？]{{0,10}}(?:{chinese})|(?:把|将|將)[^。！？，,]{{0,12}}?(?:{chinese})[^。！？]{{0,10}}?(?:{ZH_OBJECT_FIRST_VERB}))"
        ),
        format!(
            r"\b(?:введи|введите|отправь|отправьте|пришли|пришлите|укажи|укажите|сообщи|сообщите|поделись|поделитесь|вставь|вставьте|скинь|скиньте|дай|дайте|предостав)\w*(?: {w}+){{0,3}}? (?:{russian})\w*"
        ),
    ]
}

/// The verbs after a secret moved before them (`把私钥发给我们`, `将助记词填入`).
const ZH_OBJECT_FIRST_VERB: &str = "发|發|输入|輸入|填|粘贴|粘貼|貼|提交|告诉|告訴|给|給|交|上传|上傳|分享|回复|回覆|复制|複製|写|寫|贴";

/// Japanese and Korean name the secret before the verb; the match takes a few characters after
/// the verb, where a negation stands ("入力しないでください", "입력하지 마세요").
const JA_SECRET: &str = "秘密鍵|秘密キー|プライベートキー|シードフレーズ|リカバリーフレーズ|復元フレーズ|ニーモニック|パスワード|暗証番号|apiキー|リカバリーワード|復元ワード";
const KO_SECRET: &str = "개인 ?키|프라이빗 ?키|비밀 ?키|시드 ?문구|복구 ?문구|시드 ?구문|복구 ?구문|니모닉|비밀번호|패스워드|api ?키";
const IT_SECRET: &str = r"chiave privata|chiave segreta|frase di recupero|frase seed|frase segreta|frase mnemonica|parole di recupero";

/// The secret nouns of every language the rules know, for the negation scoping.
const FOREIGN_SECRET_NOUNS: &str = r"(?:clave privada|llave privada|clave secreta|chave privada|chave secreta|cle privee|cle secrete|frase semilla|frase de recuperacion|palabras de recuperacion|mnemonico|frase semente|frase-semente|frase de recuperacao|palavras de recuperacao|mnemonica|phrase de recuperation|phrase secrete|phrase mnemonique|mots de recuperation|contrasena|senha|clave de acceso|mot de passe|identifiants|privat\w* schlussel|geheim\w* schlussel|api-?schlussel|seed-?phrase|wiederherstellungsphrase|passwort|kennwort|zugangsdaten|приватн\w* ключ\w*|секретн\w* ключ\w*|сид-?фраз\w*|seed-?фраз\w*|мнемони\w*|фраз\w* восстановлени\w*|парол\w*|私钥|私鑰|密钥|密鑰|秘钥|私匙|助记词|助記詞|种子短语|種子短語|种子词|恢复短语|恢復短語|密码|密碼|口令|秘密鍵|秘密キー|プライベートキー|シードフレーズ|リカバリーフレーズ|復元フレーズ|ニーモニック|パスワード|暗証番号|apiキー|リカバリーワード|復元ワード|개인 ?키|프라이빗 ?키|비밀 ?키|시드 ?문구|복구 ?문구|시드 ?구문|복구 ?구문|니모닉|비밀번호|패스워드|api ?키|chiave privata|chiave segreta|frase di recupero|frase seed|frase segreta|frase mnemonica|parole di recupero)";

/// Every secret noun, any language: where the secret stands in a secret-ask match.
pub(super) fn secret_nouns() -> &'static Regex {
    static NOUNS: OnceLock<Regex> = OnceLock::new();
    NOUNS.get_or_init(|| {
        Regex::new(&format!(
            r"(?:\b(?:{PRIVATE_KEY}|{SEED_PHRASE}|{PASSWORD}|credentials|{API_SECRET}|{AUTH_HEADER})\b|{FOREIGN_SECRET_NOUNS})"
        ))
        .expect("the secret-noun pattern is a valid regex")
    })
}

/// `pattern` without Unicode word boundaries.
///
/// A Unicode word boundary makes the regex engine leave its fast automaton for a slow one on any
/// text with a non-ASCII character, around every candidate match: a hostile text made of
/// candidates ("send send send ... да", "отправь отправь ...") then costs several times more. The
/// folded text reads every Latin script as ASCII, so a pattern of Latin words gets ASCII
/// boundaries. A pattern with Cyrillic words (never mixed with Latin ones: they are separate
/// specs) gets boundaries made of character classes: before a word, the start of the text or a
/// character that is not a letter, digit or underscore (consumed: the match then starts one
/// character early, a space the screen trims); after a word, the end of the text or such a
/// character, or nothing when the pattern goes on with a space anyway.
fn with_fast_boundaries(pattern: &str) -> Cow<'_, str> {
    if !pattern
        .chars()
        .any(|c| matches!(c, '\u{0400}'..='\u{052F}'))
    {
        return Cow::Owned(pattern.replace(r"\b", r"(?-u:\b)"));
    }
    const BEFORE: &str = r"(?:^|[^\p{L}\p{N}_])";
    const AFTER: &str = r"(?:$|[^\p{L}\p{N}_])";
    let mut out = String::with_capacity(pattern.len() + 64);
    let mut rest = pattern;
    while let Some(at) = rest.find(r"\b") {
        let (head, tail) = (&rest[..at], &rest[at + 2..]);
        out.push_str(head);
        let starts_word =
            out.is_empty() || out.ends_with('|') || out.ends_with('(') || out.ends_with("(?:");
        if starts_word {
            out.push_str(BEFORE);
        } else if !(tail.starts_with(' ') || tail.starts_with("(?: ")) {
            out.push_str(AFTER);
        }
        rest = tail;
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// All rules, compiled once, grouped by id in the order the ids first appear.
pub(super) fn rule_groups() -> &'static [RuleGroup] {
    static GROUPS: OnceLock<Vec<RuleGroup>> = OnceLock::new();
    GROUPS.get_or_init(|| {
        let mut groups: Vec<RuleGroup> = Vec::new();
        for spec in specs() {
            // The patterns are constants of this file; the unit tests compile every one.
            let compile = |pattern: &str| {
                Regex::new(pattern)
                    .unwrap_or_else(|e| panic!("screen rule {} does not compile: {e}", spec.id))
            };
            let rule = Rule {
                check: match spec.check {
                    CheckSpec::None => MatchCheck::None,
                    CheckSpec::SecretAsk => MatchCheck::SecretAsk,
                    CheckSpec::Veto(veto) => MatchCheck::Veto(compile(veto)),
                },
                loose: spec.loose,
                regex: compile(&with_fast_boundaries(&spec.pattern)),
            };
            match groups.iter_mut().find(|g| g.id == spec.id) {
                Some(group) => {
                    assert!(
                        group.category == spec.category,
                        "rule {} has two categories",
                        spec.id
                    );
                    group.rules.push(rule);
                }
                None => groups.push(RuleGroup {
                    id: spec.id,
                    category: spec.category,
                    rules: vec![rule],
                }),
            }
        }
        groups
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_boundaries() {
        assert_eq!(with_fast_boundaries(r"\bsend\b"), r"(?-u:\b)send(?-u:\b)");
        assert_eq!(
            with_fast_boundaries(r"(?:\bтеперь ты\b|\b(?:дай)\b(?: \w+)? x)"),
            r"(?:(?:^|[^\p{L}\p{N}_])теперь ты(?:$|[^\p{L}\p{N}_])|(?:^|[^\p{L}\p{N}_])(?:дай)(?: \w+)? x)"
        );
        let re = Regex::new(&with_fast_boundaries(r"\bтеперь ты\b")).unwrap();
        assert!(re.is_match("и теперь ты бот"));
        assert!(re.is_match("теперь ты"));
        assert!(!re.is_match("теперь тыква"));
    }

    #[test]
    fn every_rule_compiles_and_ids_are_namespaced() {
        let groups = rule_groups();
        assert!(groups.iter().map(|g| g.rules.len()).sum::<usize>() > 30);
        assert!(secret_nouns().is_match("seed phrase"));
        for group in groups {
            let prefix = match group.category {
                Category::Injection => "inj.",
                Category::HiddenText => "unicode.",
                Category::Phishing => "phish.",
                Category::Malware => "malware.",
                Category::SecretAsk => "secret.",
            };
            assert!(
                group.id.starts_with(prefix),
                "{} is not under {prefix}",
                group.id
            );
        }
    }
}
