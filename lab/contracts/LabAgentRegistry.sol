// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title LabAgentRegistry: the lab's ERC-8004 identity and reputation registries in one contract
/// @notice Written for the x402-probe lab (see README.md beside it). The reputation side has the
/// ERC-8004 interface (`giveFeedback`, `readFeedback`, `getLastIndex`, `getClients`, `getSummary`,
/// `revokeFeedback`, the `NewFeedback` and `FeedbackRevoked` events), so what the probe sends and
/// reads here is what it sends to and reads from a real registry. The identity side is the least
/// the reputation side needs: `register(agentURI)` mints the next agent id to its caller,
/// `ownerOf`, `tokenURI`, `approve` and `isAuthorizedOrOwner` (no transfers: the lab never moves
/// an agent).
contract LabAgentRegistry {
    /// A value's magnitude is bounded as the ERC's reference registry bounds it.
    int128 private constant MAX_ABS_VALUE = 1e38;

    event Registered(uint256 indexed agentId, string agentURI, address indexed owner);
    event Approval(address indexed owner, address indexed approved, uint256 indexed agentId);

    event NewFeedback(
        uint256 indexed agentId,
        address indexed clientAddress,
        uint64 feedbackIndex,
        int128 value,
        uint8 valueDecimals,
        string indexed indexedTag1,
        string tag1,
        string tag2,
        string endpoint,
        string feedbackURI,
        bytes32 feedbackHash
    );

    event FeedbackRevoked(uint256 indexed agentId, address indexed clientAddress, uint64 indexed feedbackIndex);

    struct Feedback {
        int128 value;
        uint8 valueDecimals;
        bool isRevoked;
        string tag1;
        string tag2;
    }

    uint256 private _nextAgentId;
    mapping(uint256 => address) private _owners;
    mapping(uint256 => address) private _approved;
    mapping(uint256 => string) private _uris;

    /// agentId => client => feedback index (from 1) => feedback
    mapping(uint256 => mapping(address => mapping(uint64 => Feedback))) private _feedback;
    mapping(uint256 => mapping(address => uint64)) private _lastIndex;
    mapping(uint256 => address[]) private _clients;
    mapping(uint256 => mapping(address => bool)) private _isClient;

    // ------------------------------------------------------------------ identity

    function register(string calldata agentURI) external returns (uint256 agentId) {
        agentId = _nextAgentId++;
        _owners[agentId] = msg.sender;
        _uris[agentId] = agentURI;
        emit Registered(agentId, agentURI, msg.sender);
    }

    function ownerOf(uint256 agentId) public view returns (address owner) {
        owner = _owners[agentId];
        require(owner != address(0), "agent does not exist");
    }

    function tokenURI(uint256 agentId) external view returns (string memory) {
        ownerOf(agentId);
        return _uris[agentId];
    }

    function approve(address to, uint256 agentId) external {
        address owner = ownerOf(agentId);
        require(msg.sender == owner, "caller is not the owner");
        _approved[agentId] = to;
        emit Approval(owner, to, agentId);
    }

    function getApproved(uint256 agentId) external view returns (address) {
        ownerOf(agentId);
        return _approved[agentId];
    }

    function isAuthorizedOrOwner(address spender, uint256 agentId) public view returns (bool) {
        address owner = ownerOf(agentId);
        return spender == owner || spender == _approved[agentId];
    }

    function getIdentityRegistry() external view returns (address) {
        return address(this);
    }

    // ------------------------------------------------------------------ reputation

    function giveFeedback(
        uint256 agentId,
        int128 value,
        uint8 valueDecimals,
        // In memory, one stack slot each (calldata strings take two: the event overflows the stack).
        string memory tag1,
        string memory tag2,
        string memory endpoint,
        string memory feedbackURI,
        bytes32 feedbackHash
    ) external {
        require(valueDecimals <= 18, "too many decimals");
        require(value >= -MAX_ABS_VALUE && value <= MAX_ABS_VALUE, "value too large");
        // Reverts for an agent that does not exist; its owner and operator may not rate it.
        require(!isAuthorizedOrOwner(msg.sender, agentId), "self-feedback not allowed");

        uint64 index = ++_lastIndex[agentId][msg.sender];
        _feedback[agentId][msg.sender][index] =
            Feedback({value: value, valueDecimals: valueDecimals, isRevoked: false, tag1: tag1, tag2: tag2});
        if (!_isClient[agentId][msg.sender]) {
            _isClient[agentId][msg.sender] = true;
            _clients[agentId].push(msg.sender);
        }
        emit NewFeedback(
            agentId, msg.sender, index, value, valueDecimals, tag1, tag1, tag2, endpoint, feedbackURI, feedbackHash
        );
    }

    function revokeFeedback(uint256 agentId, uint64 feedbackIndex) external {
        require(feedbackIndex > 0 && feedbackIndex <= _lastIndex[agentId][msg.sender], "index out of bounds");
        Feedback storage f = _feedback[agentId][msg.sender][feedbackIndex];
        require(!f.isRevoked, "already revoked");
        f.isRevoked = true;
        emit FeedbackRevoked(agentId, msg.sender, feedbackIndex);
    }

    function getLastIndex(uint256 agentId, address clientAddress) external view returns (uint64) {
        return _lastIndex[agentId][clientAddress];
    }

    function readFeedback(uint256 agentId, address clientAddress, uint64 feedbackIndex)
        external
        view
        returns (int128 value, uint8 valueDecimals, string memory tag1, string memory tag2, bool isRevoked)
    {
        require(feedbackIndex > 0 && feedbackIndex <= _lastIndex[agentId][clientAddress], "index out of bounds");
        Feedback storage f = _feedback[agentId][clientAddress][feedbackIndex];
        return (f.value, f.valueDecimals, f.tag1, f.tag2, f.isRevoked);
    }

    function getClients(uint256 agentId) external view returns (address[] memory) {
        return _clients[agentId];
    }

    /// The count and mean of the unrevoked feedback the listed clients gave (tags filter when not
    /// empty), at the precision most of them used: the ERC's summary. Clients must be listed: a
    /// summary over everyone is open to Sybil reviewers.
    function getSummary(uint256 agentId, address[] calldata clientAddresses, string memory tag1, string memory tag2)
        external
        view
        returns (uint64 count, int128 summaryValue, uint8 summaryValueDecimals)
    {
        require(clientAddresses.length > 0, "clientAddresses required");
        TagFilter memory filter = TagFilter({
            tag1: keccak256(bytes(tag1)),
            tag2: keccak256(bytes(tag2)),
            anyTag1: bytes(tag1).length == 0,
            anyTag2: bytes(tag2).length == 0
        });
        int256 sumWad;
        uint64[19] memory perDecimals;
        for (uint256 i = 0; i < clientAddresses.length; i++) {
            (int256 clientSum, uint64 clientCount) = _sumOf(agentId, clientAddresses[i], filter, perDecimals);
            sumWad += clientSum;
            count += clientCount;
        }
        if (count == 0) return (0, 0, 0);
        summaryValueDecimals = _mostUsed(perDecimals);
        summaryValue = int128((sumWad / int256(uint256(count))) / int256(10 ** uint256(18 - summaryValueDecimals)));
    }

    /// One client's unrevoked feedback that passes `filter`: its sum at 18 decimals and its count,
    /// each value's precision counted in `perDecimals`.
    function _sumOf(uint256 agentId, address client, TagFilter memory filter, uint64[19] memory perDecimals)
        private
        view
        returns (int256 sumWad, uint64 count)
    {
        uint64 last = _lastIndex[agentId][client];
        for (uint64 j = 1; j <= last; j++) {
            Feedback storage f = _feedback[agentId][client][j];
            if (!_counts(f, filter)) continue;
            sumWad += int256(f.value) * int256(10 ** uint256(18 - f.valueDecimals));
            perDecimals[f.valueDecimals]++;
            count++;
        }
    }

    struct TagFilter {
        bytes32 tag1;
        bytes32 tag2;
        bool anyTag1;
        bool anyTag2;
    }

    function _counts(Feedback storage f, TagFilter memory filter) private view returns (bool) {
        return !f.isRevoked && (filter.anyTag1 || keccak256(bytes(f.tag1)) == filter.tag1)
            && (filter.anyTag2 || keccak256(bytes(f.tag2)) == filter.tag2);
    }

    function _mostUsed(uint64[19] memory perDecimals) private pure returns (uint8 decimals) {
        uint64 most;
        for (uint8 d = 0; d <= 18; d++) {
            if (perDecimals[d] > most) {
                most = perDecimals[d];
                decimals = d;
            }
        }
    }
}
