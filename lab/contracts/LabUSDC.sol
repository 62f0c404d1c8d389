// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title LabUSDC
/// @notice A USDC-like token for the x402-probe lab, written for this project: an ERC-20 with 6 decimals,
/// an owner-only mint, an EIP-712 domain whose name and version are chosen at deployment, and EIP-3009
/// transfers by signed authorization. Deploying the same bytecode with a name or version other than the
/// one a 402 declares gives the "fake USDC" the probe has to catch.
/// @dev Signatures are accepted from externally owned accounts only (65 bytes, ecrecover); the `bytes`
/// overloads exist because facilitators call them, not to support contract wallets.
contract LabUSDC {
    // ------------------------------------------------------------------ constants

    string private constant SYMBOL = "USDC";
    uint8 private constant DECIMALS = 6;

    bytes32 private constant DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");

    bytes32 public constant TRANSFER_WITH_AUTHORIZATION_TYPEHASH = keccak256(
        "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );

    bytes32 public constant RECEIVE_WITH_AUTHORIZATION_TYPEHASH = keccak256(
        "ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );

    bytes32 public constant CANCEL_AUTHORIZATION_TYPEHASH =
        keccak256("CancelAuthorization(address authorizer,bytes32 nonce)");

    /// Half the order of the secp256k1 group. For every valid (r, s) the pair (r, n - s) is valid too;
    /// accepting only the lower s leaves exactly one encoding per signature.
    uint256 private constant MAX_S = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    // ------------------------------------------------------------------ state

    address public immutable owner;

    uint256 public totalSupply;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    string private _name;
    string private _version;
    bytes32 private immutable _hashedName;
    bytes32 private immutable _hashedVersion;

    /// authorizer => nonce => used or canceled. A nonce is burned once and never comes back.
    mapping(address => mapping(bytes32 => bool)) private _authorizationBurned;

    // ------------------------------------------------------------------ events

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);
    event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);
    event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce);

    constructor(string memory name_, string memory version_) {
        owner = msg.sender;
        _name = name_;
        _version = version_;
        _hashedName = keccak256(bytes(name_));
        _hashedVersion = keccak256(bytes(version_));
    }

    // ------------------------------------------------------------------ metadata and EIP-712 domain

    function name() external view returns (string memory) {
        return _name;
    }

    function symbol() external pure returns (string memory) {
        return SYMBOL;
    }

    function decimals() external pure returns (uint8) {
        return DECIMALS;
    }

    function version() external view returns (string memory) {
        return _version;
    }

    /// @dev Recomputed on every call from the current chain id, so a fork of the chain under another id
    /// never accepts signatures made for this one. Gas does not matter in the lab.
    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return keccak256(abi.encode(DOMAIN_TYPEHASH, _hashedName, _hashedVersion, block.chainid, address(this)));
    }

    /// @notice EIP-5267: the fields of the domain. 0x0f = name, version, chainId and verifyingContract.
    function eip712Domain()
        external
        view
        returns (
            bytes1 fields,
            string memory name_,
            string memory version_,
            uint256 chainId,
            address verifyingContract,
            bytes32 salt,
            uint256[] memory extensions
        )
    {
        return (hex"0f", _name, _version, block.chainid, address(this), bytes32(0), new uint256[](0));
    }

    // ------------------------------------------------------------------ ERC-20

    function transfer(address to, uint256 value) external returns (bool) {
        _transfer(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        require(spender != address(0), "approve to the zero address");
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    /// @dev An allowance of 2^256 - 1 is treated as unlimited and never decreases.
    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        if (allowed != type(uint256).max) {
            require(allowed >= value, "insufficient allowance");
            unchecked {
                allowance[from][msg.sender] = allowed - value;
            }
        }
        _transfer(from, to, value);
        return true;
    }

    function mint(address to, uint256 value) external {
        require(msg.sender == owner, "caller is not the owner");
        require(to != address(0), "mint to the zero address");
        totalSupply += value;
        unchecked {
            // Cannot overflow: every balance is at most totalSupply, which was checked just above.
            balanceOf[to] += value;
        }
        emit Transfer(address(0), to, value);
    }

    // ------------------------------------------------------------------ EIP-3009

    /// @notice True once the nonce was used or canceled by the authorizer.
    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool) {
        return _authorizationBurned[authorizer][nonce];
    }

    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) public {
        _requireWithinWindow(validAfter, validBefore);
        bytes32 digest =
            _authorizationDigest(TRANSFER_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce);
        _burnNonce(from, nonce, digest, v, r, s);
        emit AuthorizationUsed(from, nonce);
        _transfer(from, to, value);
    }

    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes calldata signature
    ) external {
        (uint8 v, bytes32 r, bytes32 s) = _splitSignature(signature);
        transferWithAuthorization(from, to, value, validAfter, validBefore, nonce, v, r, s);
    }

    /// @notice Like transferWithAuthorization, but only the payee may submit it, so a third party who saw
    /// the signature cannot front-run the payee's own call.
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) public {
        require(to == msg.sender, "caller must be the payee");
        _requireWithinWindow(validAfter, validBefore);
        bytes32 digest =
            _authorizationDigest(RECEIVE_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce);
        _burnNonce(from, nonce, digest, v, r, s);
        emit AuthorizationUsed(from, nonce);
        _transfer(from, to, value);
    }

    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes calldata signature
    ) external {
        (uint8 v, bytes32 r, bytes32 s) = _splitSignature(signature);
        receiveWithAuthorization(from, to, value, validAfter, validBefore, nonce, v, r, s);
    }

    /// @notice Burns an unused nonce so the authorization signed with it can never be executed.
    function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s) public {
        bytes32 digest = _digest(keccak256(abi.encode(CANCEL_AUTHORIZATION_TYPEHASH, authorizer, nonce)));
        _burnNonce(authorizer, nonce, digest, v, r, s);
        emit AuthorizationCanceled(authorizer, nonce);
    }

    function cancelAuthorization(address authorizer, bytes32 nonce, bytes calldata signature) external {
        (uint8 v, bytes32 r, bytes32 s) = _splitSignature(signature);
        cancelAuthorization(authorizer, nonce, v, r, s);
    }

    // ------------------------------------------------------------------ internals

    function _transfer(address from, address to, uint256 value) private {
        require(to != address(0), "transfer to the zero address");
        uint256 held = balanceOf[from];
        require(held >= value, "transfer amount exceeds balance");
        unchecked {
            // Cannot overflow: the sum of all balances is totalSupply.
            balanceOf[from] = held - value;
            balanceOf[to] += value;
        }
        emit Transfer(from, to, value);
    }

    /// @dev Strict on both ends, as USDC is: valid only strictly after validAfter and strictly before
    /// validBefore.
    function _requireWithinWindow(uint256 validAfter, uint256 validBefore) private view {
        require(block.timestamp > validAfter, "authorization is not yet valid");
        require(block.timestamp < validBefore, "authorization is expired");
    }

    function _authorizationDigest(
        bytes32 typehash,
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce
    ) private view returns (bytes32) {
        return _digest(keccak256(abi.encode(typehash, from, to, value, validAfter, validBefore, nonce)));
    }

    function _digest(bytes32 structHash) private view returns (bytes32) {
        return keccak256(abi.encodePacked(hex"1901", DOMAIN_SEPARATOR(), structHash));
    }

    /// @dev Checks that `authorizer` signed `digest` and that the nonce is fresh, then burns the nonce.
    function _burnNonce(address authorizer, bytes32 nonce, bytes32 digest, uint8 v, bytes32 r, bytes32 s) private {
        require(!_authorizationBurned[authorizer][nonce], "authorization is used or canceled");
        require(uint256(s) <= MAX_S, "invalid signature s value");
        require(v == 27 || v == 28, "invalid signature v value");
        address signer = ecrecover(digest, v, r, s);
        require(signer != address(0) && signer == authorizer, "invalid signature");
        _authorizationBurned[authorizer][nonce] = true;
    }

    /// @dev r || s || v, 65 bytes, v being 27 or 28 (checked later with the rest of the signature).
    function _splitSignature(bytes calldata signature) private pure returns (uint8 v, bytes32 r, bytes32 s) {
        require(signature.length == 65, "invalid signature length");
        r = bytes32(signature[0:32]);
        s = bytes32(signature[32:64]);
        v = uint8(signature[64]);
    }
}
